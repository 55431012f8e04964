//! Benchmarks of the trust graph: score lookup on the request path, an incremental update (a
//! raised edge), and a full recomputation (a lowered edge), at growing graph sizes.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use gateway_core::Did;
use gateway_domain::ports::TrustEdge;
use gateway_domain::trust::TrustGraph;

fn did(n: u64) -> Did {
    Did::parse(&format!("did:key:z{n}")).unwrap()
}

/// A graph of `nodes` DIDs with about five outgoing edges each, anchored at 10 DIDs; edges come
/// from a fixed linear congruential sequence so every run builds the same graph.
fn graph(nodes: u64) -> (TrustGraph, Vec<TrustEdge>) {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    let mut edges = Vec::new();
    for source in 0..nodes {
        for _ in 0..5 {
            let target = next() % nodes;
            if target != source {
                let score = 0.5 + (next() % 500) as f64 / 1000.0;
                edges.push(TrustEdge { source: did(source), target: did(target), score, updated_at: 0 });
            }
        }
    }
    let anchors = (0..10).map(did).collect();
    (TrustGraph::new(anchors, 0.0, edges.clone()), edges)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("trust");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1)).sample_size(20);
    for nodes in [1_000u64, 10_000, 50_000] {
        let (graph, edges) = graph(nodes);
        let probe = did(nodes / 2);
        group.bench_with_input(BenchmarkId::new("score_lookup", nodes), &nodes, |b, _| {
            b.iter(|| graph.score(black_box(&probe)))
        });
        group.bench_with_input(BenchmarkId::new("raise_edge_incremental", nodes), &nodes, |b, _| {
            b.iter_batched(
                || {
                    // Unmeasured: lower the edge first, so the measured step is a pure raise.
                    let mut edge = edges[edges.len() / 3].clone();
                    edge.score = 0.5;
                    graph.apply_set(edge.clone());
                    edge.score = 1.0;
                    edge
                },
                |edge| graph.apply_set(edge),
                BatchSize::PerIteration,
            )
        });
        group.bench_with_input(BenchmarkId::new("lower_edge_recompute", nodes), &nodes, |b, _| {
            b.iter(|| {
                let mut edge = edges[edges.len() / 3].clone();
                edge.score = 0.1;
                graph.apply_set(edge.clone());
                edge.score = 0.05;
                graph.apply_set(edge)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
