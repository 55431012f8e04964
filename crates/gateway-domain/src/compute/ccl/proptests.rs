//! Property tests of the CCL parser and interpreter over generated contracts: random rule bodies
//! (well- and ill-typed, nested close to the depth limit), random inputs and fuel limits, and
//! arbitrary text and JSON thrown at the parser.
//!
//! They check the invariants the rest of the gateway relies on: nothing panics, fuel never
//! exceeds the limit, a run is a pure function of its arguments, and `fuel_used` is exactly the
//! fuel a run needs. They deliberately do not check computed values; the unit tests beside each
//! module do that.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value as Json, json};

use super::{MAX_DEPTH, Outcome, RunResult, parse_contract, run};

/// Variable names that always resolve: parameters and state variables.
const BOUND_NAMES: &[&str] = &["a", "b", "total", "label", "doc"];
/// Names that resolve only after a `Let` (`x`, `y`) or never (`nope`).
const OTHER_NAMES: &[&str] = &["x", "y", "nope"];
const LET_NAMES: &[&str] = &["x", "y", "a", "total"];
const STATE_NAMES: &[&str] = &["total", "label", "doc"];
const OPS: &[&str] = &["Add", "Sub", "Mul", "Div", "Mod", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or"];

fn leaf() -> impl Strategy<Value = Json> {
    prop_oneof![
        (-4i64..=4).prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        prop_oneof![Just(i64::MAX), Just(i64::MIN)].prop_map(Json::from),
        (-1e3f64..1e3).prop_map(|f| json!(f)),
        prop_oneof![Just(1e300), Just(-1e300), Just(0.5)].prop_map(|f| json!(f)),
        "[a-c]{0,3}".prop_map(Json::from),
        any::<bool>().prop_map(Json::from),
        var_name().prop_map(|name| json!({ "Var": name })),
    ]
}

/// Mostly names that resolve, so that most generated contracts parse and run; sometimes one
/// that may not, so that resolution errors are exercised too.
fn var_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![200 => select(BOUND_NAMES), 1 => select(OTHER_NAMES)]
}

/// Mostly declared state variables, rarely an undeclared one.
fn set_target() -> impl Strategy<Value = &'static str> {
    prop_oneof![400 => select(STATE_NAMES), 1 => Just("missing")]
}

/// Any expression: a mix of well-typed numeric and boolean expressions (which mostly run to
/// the end) and unconstrained ones (which mostly meet type errors).
fn expr() -> impl Strategy<Value = Json> {
    prop_oneof![3 => numeric_expr(), 3 => boolean_expr(), 2 => untyped_expr()]
}

fn untyped_expr() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(6, 48, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|operand| json!({ "Not": operand })),
            (select(OPS), inner.clone(), inner).prop_map(|(op, left, right)| json!({ op: [left, right] })),
        ]
    })
}

/// Integer expressions over small literals and the numeric variables `a`, `b` and `total`.
/// They can still fail (division by zero, overflow), as real arithmetic can.
fn numeric_expr() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        (-9i64..=9).prop_map(Json::from),
        select(&["a", "b", "total"][..]).prop_map(|name| json!({ "Var": name })),
    ];
    leaf.prop_recursive(5, 32, 2, |inner| {
        (prop_oneof![6 => select(&["Add", "Sub", "Mul"][..]), 1 => select(&["Div", "Mod"][..])], inner.clone(), inner)
            .prop_map(|(op, left, right)| json!({ op: [left, right] }))
    })
}

fn boolean_expr() -> impl Strategy<Value = Json> {
    let comparison = (select(&["Eq", "Ne", "Lt", "Le", "Gt", "Ge"][..]), numeric_expr(), numeric_expr())
        .prop_map(|(op, left, right)| json!({ op: [left, right] }));
    let leaf = prop_oneof![any::<bool>().prop_map(Json::from), comparison];
    leaf.prop_recursive(3, 16, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|operand| json!({ "Not": operand })),
            (select(&["And", "Or"][..]), inner.clone(), inner)
                .prop_map(|(op, left, right)| json!({ op: [left, right] })),
        ]
    })
}

/// A `requires` expression: usually boolean, sometimes anything.
fn requirement() -> impl Strategy<Value = Json> {
    prop_oneof![4 => boolean_expr(), 1 => expr()]
}

/// A chain of `length` operators, each with a leaf on one side, so that the nesting reaches
/// (and sometimes exceeds) the depth limit.
fn deep_expr() -> impl Strategy<Value = Json> {
    (vec((select(OPS), leaf(), any::<bool>()), 0..MAX_DEPTH + 1), leaf()).prop_map(|(links, innermost)| {
        links.into_iter().fold(innermost, |inner, (op, other, inner_left)| {
            if inner_left { json!({ op: [inner, other] }) } else { json!({ op: [other, inner] }) }
        })
    })
}

fn stmt() -> impl Strategy<Value = Json> {
    let simple = prop_oneof![
        8 => (select(LET_NAMES), expr()).prop_map(|(name, e)| json!({ "Let": [name, e] })),
        8 => (set_target(), expr()).prop_map(|(name, e)| json!({ "Set": [name, e] })),
        2 => expr().prop_map(|e| json!({ "Return": e })),
        1 => deep_expr().prop_map(|e| json!({ "Return": e })),
    ];
    simple.prop_recursive(4, 24, 4, |inner| {
        let cond = prop_oneof![4 => boolean_expr(), 1 => expr()];
        (cond, vec(inner.clone(), 0..4), vec(inner, 0..4))
            .prop_map(|(cond, then_branch, else_branch)| json!({ "If": [cond, then_branch, else_branch] }))
    })
}

fn contract_code(requires: Vec<Json>, body: Vec<Json>) -> String {
    json!({
        "name": "generated",
        "participants": ["did:key:z6MkAlice"],
        "currency": "hours",
        "state_vars": {"total": 0, "label": "start", "doc": [1, {"k": null}]},
        "rules": [
            {"name": "main", "params": ["a", "b"], "requires": requires, "body": body},
            {"name": "other", "params": ["a"], "requires": [], "body": [{"Return": {"Var": "a"}}]}
        ],
        "triggers": [{"rule": "main", "on": "tick"}]
    })
    .to_string()
}

fn input_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "-?[0-9]{1,3}",
        1 => "-?[0-9]{18,21}",
        1 => "[0-9]{1,3}\\.[0-9]{1,3}",
        1 => "[a-c]{0,3}",
        1 => Just("NaN".to_owned()),
        1 => Just("1e308".to_owned()),
        1 => Just("0".to_owned()),
    ]
}

/// Inputs with `a` and `b` usually present, sometimes an unused extra, and a `rule` that is
/// usually absent, sometimes names either rule and sometimes no rule at all.
fn inputs() -> impl Strategy<Value = BTreeMap<String, String>> {
    let usually = || prop::option::weighted(0.9, input_text());
    let rule = prop_oneof![
        6 => Just(None),
        3 => Just(Some("main")),
        1 => Just(Some("other")),
        1 => Just(Some("zzz")),
    ];
    (usually(), usually(), prop::option::of(input_text()), rule).prop_map(|(a, b, unused, rule)| {
        let mut inputs = BTreeMap::new();
        for (name, text) in [("a", a), ("b", b), ("unused", unused)] {
            if let Some(text) = text {
                inputs.insert(name.to_owned(), text);
            }
        }
        if let Some(rule) = rule {
            inputs.insert("rule".to_owned(), rule.to_owned());
        }
        inputs
    })
}

fn fuel_limit() -> impl Strategy<Value = u64> {
    prop_oneof![2 => 0u64..48, 1 => 0u64..2_000, 1 => Just(u64::MAX)]
}

/// Checks the invariants of one result against its limit.
fn check_shape(result: &RunResult, fuel_limit: u64) -> Result<(), TestCaseError> {
    prop_assert!(result.fuel_used <= fuel_limit);
    match result.outcome {
        Outcome::Success => {
            prop_assert!(result.error.is_none());
            let output = result.output.as_ref();
            prop_assert!(output.is_some_and(|o| o.get("value").is_some() && o["state"].is_object()));
        }
        Outcome::Failed => {
            prop_assert!(result.output.is_none());
            prop_assert!(result.error.is_some());
        }
        Outcome::OutOfFuel => {
            prop_assert!(result.output.is_none());
            prop_assert!(result.error.is_some());
            prop_assert_eq!(result.fuel_used, fuel_limit);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_rules_never_panic_respect_fuel_and_are_deterministic(
        requires in vec(requirement(), 0..3),
        body in vec(stmt(), 0..8),
        inputs in inputs(),
        fuel_limit in fuel_limit(),
    ) {
        let code = contract_code(requires, body);
        let Ok(contract) = parse_contract(&code) else {
            return Ok(());
        };
        let first = run(&contract, &inputs, fuel_limit);
        check_shape(&first, fuel_limit)?;
        let second = run(&contract, &inputs, fuel_limit);
        prop_assert_eq!(&first, &second);
        // A clone of the contract, and one parsed again, behave identically.
        prop_assert_eq!(&run(&contract.clone(), &inputs, fuel_limit), &first);
        let reparsed = parse_contract(&code).expect("parsed once, parses again");
        prop_assert_eq!(&run(&reparsed, &inputs, fuel_limit), &first);
    }

    #[test]
    fn fuel_used_is_exactly_the_fuel_a_run_needs(
        requires in vec(requirement(), 0..3),
        body in vec(stmt(), 0..8),
        inputs in inputs(),
    ) {
        let Ok(contract) = parse_contract(&contract_code(requires, body)) else {
            return Ok(());
        };
        let unlimited = run(&contract, &inputs, u64::MAX);
        check_shape(&unlimited, u64::MAX)?;
        prop_assert_ne!(unlimited.outcome, Outcome::OutOfFuel);
        let needed = unlimited.fuel_used;
        // Exactly enough fuel gives the same result, success or failure.
        prop_assert_eq!(&run(&contract, &inputs, needed), &unlimited);
        // One unit less runs out, unless the run stopped before its first charge.
        if needed > 0 {
            let short = run(&contract, &inputs, needed - 1);
            check_shape(&short, needed - 1)?;
            prop_assert_eq!(short.outcome, Outcome::OutOfFuel);
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parser(code in any::<String>()) {
        let _ = parse_contract(&code);
    }

    #[test]
    fn arbitrary_json_in_any_field_never_panics(
        json in arbitrary_json(),
        field in select(&["name", "participants", "currency", "state_vars", "rules", "triggers"][..]),
        in_body in any::<bool>(),
        inputs in inputs(),
        fuel_limit in fuel_limit(),
    ) {
        let code = if in_body {
            contract_code(vec![], vec![json])
        } else {
            let mut contract: Json = serde_json::from_str(&contract_code(vec![], vec![]))
                .expect("the skeleton is JSON");
            contract[field] = json;
            contract.to_string()
        };
        if let Ok(contract) = parse_contract(&code) {
            check_shape(&run(&contract, &inputs, fuel_limit), fuel_limit)?;
        }
    }
}

/// Guards against vacuous properties: the generators must produce contracts that parse and
/// runs that end in each of the three outcomes, in a reasonable share of cases.
#[test]
fn generators_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let strategy = (vec(requirement(), 0..3), vec(stmt(), 0..8), inputs(), fuel_limit());
    let mut runner = TestRunner::deterministic();
    let (mut parsed, mut success, mut failed, mut out_of_fuel) = (0, 0, 0, 0);
    let cases = 400;
    for _ in 0..cases {
        let (requires, body, inputs, fuel_limit) =
            strategy.new_tree(&mut runner).expect("strategies without filters always generate").current();
        let Ok(contract) = parse_contract(&contract_code(requires, body)) else {
            continue;
        };
        parsed += 1;
        match run(&contract, &inputs, fuel_limit).outcome {
            Outcome::Success => success += 1,
            Outcome::Failed => failed += 1,
            Outcome::OutOfFuel => out_of_fuel += 1,
        }
    }
    assert!(parsed * 4 >= cases, "only {parsed} of {cases} parsed");
    assert!(success * 20 >= cases, "{success} successes");
    assert!(failed * 20 >= cases, "{failed} failures");
    assert!(out_of_fuel * 20 >= cases, "{out_of_fuel} out of fuel");
}

/// Any JSON, biased toward the keys and shapes of CCL so that some of it is nearly valid.
fn arbitrary_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Json::from),
        var_name().prop_map(Json::from),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        let key = prop_oneof![
            select(&["Let", "Set", "If", "Return", "Var", "Not", "Add", "And", "name", "rule", "on"][..])
                .prop_map(str::to_owned),
            any::<String>(),
        ];
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Json::Array),
            btree_map(key, inner, 0..3).prop_map(|map| Json::Object(map.into_iter().collect())),
        ]
    })
}
