//! The trust graph: edges between DIDs, and each DID's score.
//!
//! A DID's score is 1.0 for a configured anchor; otherwise the larger of the configured default
//! and the maximum, over all paths from an anchor, of the product of the edge scores along the
//! path: an edge can raise a score above the default, never push it below.
//! The trust classes derived from a score are `gateway_limits::TrustClass` (the velocity layer
//! is their main user). Scores are computed in memory and kept behind a read-write lock, so a lookup on the request
//! path is one hash-map read under a read lock. Raising or adding an edge only raises scores, so it is
//! propagated incrementally from the edge; lowering or removing one recomputes the snapshot
//! (a max-product Dijkstra from the anchors, O(E log V)). This module stores edges only through
//! its ports.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use gateway_core::{Clock, Did, Error};

use crate::ports::{Transactor, TrustEdge, TrustReads, transaction};

#[derive(Debug, Default, Clone)]
struct Snapshot {
    outgoing: HashMap<Did, HashMap<Did, TrustEdge>>,
    incoming: HashMap<Did, HashSet<Did>>,
    scores: HashMap<Did, f64>,
}

#[derive(PartialEq)]
struct Candidate(f64, Did);

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then_with(|| other.1.cmp(&self.1))
    }
}

impl Snapshot {
    /// Relaxes scores outward from the seeds (max-product Dijkstra); only ever raises scores.
    fn propagate(&mut self, seeds: Vec<(Did, f64)>) {
        let mut heap: BinaryHeap<Candidate> = seeds.into_iter().map(|(d, s)| Candidate(s, d)).collect();
        while let Some(Candidate(score, did)) = heap.pop() {
            if self.scores.get(&did).is_some_and(|&best| best > score) {
                continue;
            }
            let Some(edges) = self.outgoing.get(&did) else { continue };
            for edge in edges.values() {
                let through = score * edge.score;
                if through <= 0.0 {
                    continue;
                }
                let best = self.scores.entry(edge.target.clone()).or_insert(0.0);
                if through > *best {
                    *best = through;
                    heap.push(Candidate(through, edge.target.clone()));
                }
            }
        }
    }

    fn recompute(&mut self, anchors: &HashSet<Did>) {
        self.scores = anchors.iter().map(|a| (a.clone(), 1.0)).collect();
        self.propagate(anchors.iter().map(|a| (a.clone(), 1.0)).collect());
    }
}

/// The in-memory graph and its scores.
#[derive(Debug)]
pub struct TrustGraph {
    anchors: HashSet<Did>,
    default_score: f64,
    snapshot: RwLock<Snapshot>,
}

impl TrustGraph {
    /// A graph with its anchors and default score, and the given edges.
    pub fn new(anchors: Vec<Did>, default_score: f64, edges: Vec<TrustEdge>) -> Self {
        let graph =
            Self { anchors: anchors.into_iter().collect(), default_score, snapshot: RwLock::new(Snapshot::default()) };
        graph.replace_edges(edges);
        graph
    }

    /// Replaces every edge (start-up, or a refresh from a shared store) and recomputes.
    pub fn replace_edges(&self, edges: Vec<TrustEdge>) {
        let mut snapshot = Snapshot::default();
        for edge in edges {
            snapshot.incoming.entry(edge.target.clone()).or_default().insert(edge.source.clone());
            snapshot.outgoing.entry(edge.source.clone()).or_default().insert(edge.target.clone(), edge);
        }
        snapshot.recompute(&self.anchors);
        *self.snapshot.write().expect("trust lock") = snapshot;
    }

    /// The score of a DID: O(1). Never below the default: a weak path from an anchor cannot
    /// lower a DID that no path reaches at all.
    pub fn score(&self, did: &Did) -> f64 {
        self.score_of(did.as_str())
    }

    /// [`TrustGraph::score`] by a DID's text, with nothing parsed: text that is no DID in the
    /// graph gets the default.
    pub fn score_of(&self, did: &str) -> f64 {
        if self.anchors.contains(did) {
            return 1.0;
        }
        let snapshot = self.snapshot.read().expect("trust lock");
        snapshot.scores.get(did).copied().unwrap_or(0.0).max(self.default_score)
    }

    /// Outgoing and incoming edges of a DID.
    pub fn edges_of(&self, did: &Did) -> (Vec<TrustEdge>, Vec<TrustEdge>) {
        let snapshot = self.snapshot.read().expect("trust lock");
        let mut outgoing: Vec<TrustEdge> =
            snapshot.outgoing.get(did).map(|m| m.values().cloned().collect()).unwrap_or_default();
        let mut incoming: Vec<TrustEdge> = snapshot
            .incoming
            .get(did)
            .map(|sources| {
                sources.iter().filter_map(|s| snapshot.outgoing.get(s).and_then(|m| m.get(did)).cloned()).collect()
            })
            .unwrap_or_default();
        outgoing.sort_by(|a, b| a.target.cmp(&b.target));
        incoming.sort_by(|a, b| a.source.cmp(&b.source));
        (outgoing, incoming)
    }

    /// Applies a set or replaced edge.
    pub fn apply_set(&self, edge: TrustEdge) {
        let mut snapshot = self.snapshot.write().expect("trust lock");
        let previous = snapshot.outgoing.get(&edge.source).and_then(|m| m.get(&edge.target)).map(|e| e.score);
        snapshot.incoming.entry(edge.target.clone()).or_default().insert(edge.source.clone());
        let source = edge.source.clone();
        let raised = previous.is_none_or(|p| edge.score >= p);
        snapshot.outgoing.entry(edge.source.clone()).or_default().insert(edge.target.clone(), edge);
        if raised {
            let seed = snapshot.scores.get(&source).copied().unwrap_or(0.0);
            if seed > 0.0 {
                snapshot.propagate(vec![(source, seed)]);
            }
        } else {
            snapshot.recompute(&self.anchors);
        }
    }

    /// Applies a removed edge.
    pub fn apply_remove(&self, source: &Did, target: &Did) {
        let mut snapshot = self.snapshot.write().expect("trust lock");
        if let Some(edges) = snapshot.outgoing.get_mut(source) {
            edges.remove(target);
        }
        if let Some(sources) = snapshot.incoming.get_mut(target) {
            sources.remove(source);
        }
        snapshot.recompute(&self.anchors);
    }

    /// Number of edges.
    pub fn edge_count(&self) -> usize {
        self.snapshot.read().expect("trust lock").outgoing.values().map(HashMap::len).sum()
    }
}

/// The trust service: edges through the store, scores from the graph.
#[derive(Debug, Clone)]
pub struct Trust {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn TrustReads>,
    graph: Arc<TrustGraph>,
    clock: Arc<dyn Clock>,
}

impl Trust {
    /// The service; `graph` should have been loaded from `reads`.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn TrustReads>,
        graph: Arc<TrustGraph>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, graph, clock }
    }

    /// The graph, for score lookups.
    pub fn graph(&self) -> &Arc<TrustGraph> {
        &self.graph
    }

    /// Sets or replaces the caller's edge to `target`; returns the edge and whether it replaced
    /// one.
    pub async fn set_edge(&self, source: &Did, target: &Did, score: f64) -> Result<(TrustEdge, bool), Error> {
        if source == target {
            return Err(Error::bad_request_field("target_did", "a DID cannot trust itself"));
        }
        if !(0.0..=1.0).contains(&score) {
            return Err(Error::bad_request_field("score", "score must be between 0 and 1"));
        }
        let edge =
            TrustEdge { source: source.clone(), target: target.clone(), score, updated_at: self.clock.now_unix_secs() };
        let stored = edge.clone();
        let replaced =
            transaction(self.transactor.as_ref(), move |tx| Box::pin(async move { tx.upsert_edge(&stored).await }))
                .await?;
        self.graph.apply_set(edge.clone());
        Ok((edge, replaced))
    }

    /// Revokes the caller's edge to `target`.
    pub async fn remove_edge(&self, source: &Did, target: &Did) -> Result<(), Error> {
        let (s, t) = (source.clone(), target.clone());
        let existed =
            transaction(self.transactor.as_ref(), move |tx| Box::pin(async move { tx.delete_edge(&s, &t).await }))
                .await?;
        if !existed {
            return Err(Error::not_found("trust edge", format!("{source} -> {target}")));
        }
        self.graph.apply_remove(source, target);
        Ok(())
    }

    /// Reloads every edge from the store (for replicas sharing a database).
    pub async fn refresh(&self) -> Result<(), Error> {
        let edges = self.reads.all_edges().await?;
        self.graph.replace_edges(edges);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn did(n: u32) -> Did {
        Did::parse(&format!("did:key:z{n}")).unwrap()
    }

    fn edge(a: u32, b: u32, score: f64) -> TrustEdge {
        TrustEdge { source: did(a), target: did(b), score, updated_at: 0 }
    }

    #[test]
    fn best_path_product_from_anchors() {
        let graph = TrustGraph::new(
            vec![did(0)],
            0.05,
            vec![edge(0, 1, 0.9), edge(1, 2, 0.5), edge(0, 2, 0.3), edge(3, 4, 1.0)],
        );
        assert_eq!(graph.score(&did(0)), 1.0);
        assert!((graph.score(&did(1)) - 0.9).abs() < 1e-12);
        assert!((graph.score(&did(2)) - 0.45).abs() < 1e-12, "0.9 × 0.5 beats the direct 0.3");
        assert_eq!(graph.score(&did(4)), 0.05, "unreachable from an anchor: the default");
        // By text, as the limiters ask: the same scores, and the default for anything else.
        for n in 0..5 {
            assert_eq!(graph.score_of(did(n).as_str()), graph.score(&did(n)), "did {n}");
        }
        assert_eq!(graph.score_of("did:key:z0 "), 0.05);
        assert_eq!(graph.score_of("not a did"), 0.05);
    }

    #[test]
    fn an_edge_never_pushes_a_score_below_the_default() {
        let graph = TrustGraph::new(vec![did(0)], 0.5, vec![edge(0, 1, 0.9), edge(1, 2, 0.2), edge(0, 3, 0.0)]);
        assert!((graph.score(&did(1)) - 0.9).abs() < 1e-12, "a strong path raises it");
        assert_eq!(graph.score(&did(2)), 0.5, "0.9 × 0.2 = 0.18 is below the default");
        assert_eq!(graph.score(&did(3)), 0.5, "a zero edge is no distrust");
        assert_eq!(graph.score(&did(4)), 0.5, "unreachable");
        graph.apply_set(edge(0, 4, 0.1));
        assert_eq!(graph.score(&did(4)), 0.5, "a new weak edge changes nothing");
        assert_eq!(graph.score(&did(0)), 1.0, "anchors stay 1.0");
    }

    #[test]
    fn raising_is_incremental_and_lowering_recomputes() {
        let graph = TrustGraph::new(vec![did(0)], 0.0, vec![edge(0, 1, 0.5), edge(1, 2, 0.5)]);
        graph.apply_set(edge(0, 1, 0.8));
        assert!((graph.score(&did(2)) - 0.4).abs() < 1e-12);
        graph.apply_set(edge(0, 1, 0.2));
        assert!((graph.score(&did(2)) - 0.1).abs() < 1e-12);
        graph.apply_remove(&did(0), &did(1));
        assert_eq!(graph.score(&did(2)), 0.0);
        assert_eq!(graph.edge_count(), 1);
    }

    proptest::proptest! {
        /// Incremental updates agree with a full recomputation.
        #[test]
        fn incremental_equals_recompute(ops in proptest::collection::vec((0u32..6, 0u32..6, 0.0f64..=1.0, proptest::bool::ANY), 1..40)) {
            let graph = TrustGraph::new(vec![did(0)], 0.0, vec![]);
            for (a, b, score, remove) in ops {
                if a == b { continue; }
                if remove { graph.apply_remove(&did(a), &did(b)); } else { graph.apply_set(edge(a, b, score)); }
            }
            let edges: Vec<TrustEdge> = graph.snapshot.read().unwrap().outgoing.values().flat_map(|m| m.values().cloned()).collect();
            let fresh = TrustGraph::new(vec![did(0)], 0.0, edges);
            for n in 0..6 {
                proptest::prop_assert!((graph.score(&did(n)) - fresh.score(&did(n))).abs() < 1e-12);
            }
        }
    }
}
