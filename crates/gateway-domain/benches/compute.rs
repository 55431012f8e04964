//! Benchmarks of the built-in CCL executor: interpreter throughput in fuel units per second on a
//! representative contract, and parsing throughput in bytes per second.
//!
//! The contract is a payout settlement: integer arithmetic, comparisons, nested branches, local
//! bindings that shadow each other, state updates and one string concatenation. It does not
//! measure task handling, storage or signatures, which are not part of the interpreter.

// `criterion_group!` generates a public function without a doc comment, which the workspace's
// `missing_docs` lint would report.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gateway_domain::compute::ccl::{Outcome, parse_contract, run};
use serde_json::{Value, json};

/// How many settlement blocks the rule body holds; each costs a few dozen units of fuel.
const BLOCKS: usize = 40;

/// The highest fuel limit the compute contract allows; the run needs far less.
const FUEL_LIMIT: u64 = 10_000_000;

fn var(name: &str) -> Value {
    json!({ "Var": name })
}

fn op(name: &str, left: impl Into<Value>, right: impl Into<Value>) -> Value {
    json!({ name: [left.into(), right.into()] })
}

/// One block: compute a gross amount, add it to the pool with or without a bonus, then split
/// the pool and record either a payout or a remainder.
fn settlement_block(index: usize) -> Vec<Value> {
    let gross = op("Add", op("Mul", var("hours"), var("rate")), index as i64);
    vec![
        json!({ "Let": ["gross", gross] }),
        json!({ "If": [
            op("Ge", var("gross"), var("bonus_threshold")),
            [
                { "Let": ["bonus", op("Div", op("Sub", var("gross"), var("bonus_threshold")), 10)] },
                { "Set": ["pool", op("Add", op("Add", var("pool"), var("gross")), var("bonus"))] }
            ],
            [
                { "Set": ["pool", op("Add", var("pool"), var("gross"))] }
            ]
        ]}),
        json!({ "Let": ["share", op("Div", var("pool"), var("members"))] }),
        json!({ "If": [
            op("And", op("Eq", op("Mod", var("share"), 2), 0), op("Gt", var("share"), 100)),
            [ { "Set": ["payouts", op("Add", var("payouts"), 1)] } ],
            [ { "Set": ["paid_out", op("Add", var("paid_out"), op("Mod", var("share"), 7))] } ]
        ]}),
    ]
}

fn representative_contract() -> String {
    let mut body: Vec<Value> = (0..BLOCKS).flat_map(settlement_block).collect();
    body.push(json!({ "Set": ["note", op("Add", var("note"), " the cooperative")] }));
    body.push(json!({ "Return": var("pool") }));
    json!({
        "name": "payout_settlement",
        "participants": ["did:key:z6MkAlice", "did:key:z6MkBob", "did:web:coop.example"],
        "currency": "hours",
        "state_vars": { "pool": 0, "paid_out": 0, "payouts": 0, "note": "settled by" },
        "rules": [{
            "name": "settle",
            "params": ["hours", "rate", "members", "bonus_threshold"],
            "requires": [
                op("Gt", var("hours"), 0),
                op("Gt", var("rate"), 0),
                op("Gt", var("members"), 0)
            ],
            "body": body
        }],
        "triggers": [{ "rule": "settle", "on": "period_closed" }]
    })
    .to_string()
}

fn ccl(c: &mut Criterion) {
    let code = representative_contract();
    let contract = parse_contract(&code).expect("the benchmark contract parses");
    let inputs: BTreeMap<String, String> =
        [("hours", "38"), ("rate", "25"), ("members", "7"), ("bonus_threshold", "960")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let probe = run(&contract, &inputs, FUEL_LIMIT);
    assert_eq!(probe.outcome, Outcome::Success, "{:?}", probe.error);
    eprintln!("ccl/run: {} fuel units per run, {} bytes of code", probe.fuel_used, code.len());

    let mut group = c.benchmark_group("ccl");
    group.throughput(Throughput::Elements(probe.fuel_used));
    group.bench_function("run", |b| b.iter(|| run(black_box(&contract), black_box(&inputs), black_box(FUEL_LIMIT))));
    group.throughput(Throughput::Bytes(code.len() as u64));
    group.bench_function("parse", |b| b.iter(|| parse_contract(black_box(&code))));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = ccl
}
criterion_main!(benches);
