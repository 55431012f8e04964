//! The per-process hub: turns the store's commit signals into per-coop "new events up to seq"
//! notifications, and keeps a shared cache of each active coop's recent events.
//!
//! One task listens to the [`EventFeed`] and wakes the fetcher of the signalled coop (every
//! active coop when the broadcast lagged). Each coop with at least one subscriber has one
//! fetcher task, which reads the outbox by sequence number from the last event it has, renders
//! every new event's `Event` frame once into a ring buffer, and publishes the new head on a
//! `watch` channel. Connections read frames from that buffer, so a thousand subscribers of one
//! coop cost one store read per batch of events, not a thousand. A signal's content is never
//! trusted beyond "something new may exist": the outbox read by sequence number is the truth,
//! and a periodic poll covers signals lost altogether (e.g. while a PostgreSQL listener
//! reconnects).
//!
//! The hub does not decide what a connection sends or when: connections keep their own cursor
//! and fall back to the store for anything older than the cache. It does note, once per event,
//! which cached events remove a member (`MemberRemoved`), so that a connection learns of its
//! own DID's removal as soon as the head moves past it, however far behind its cursor is.

use std::collections::VecDeque;
use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use gateway_core::CoopId;
use gateway_domain::ports::{EventFeed, EventReads};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, watch};

use crate::auth::removed_member;
use crate::protocol::render_event;

/// How long the fetcher waits before retrying after the store failed.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Settings of the hub, taken from [`crate::WsConfig`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct HubSettings {
    /// Events per store read.
    pub(crate) read_batch: u32,
    /// Most events cached per coop.
    pub(crate) cache_events: usize,
    /// Most bytes of rendered frames cached per coop.
    pub(crate) cache_bytes: usize,
    /// Poll interval without signals.
    pub(crate) poll_interval: Duration,
}

/// The hub; cheap to clone.
#[derive(Clone)]
pub(crate) struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    reads: Arc<dyn EventReads>,
    settings: HubSettings,
    coops: Mutex<HashMap<CoopId, CoopEntry>>,
    /// Dropped with the hub, which stops the signal task.
    _stop: watch::Sender<()>,
}

struct CoopEntry {
    feed: Arc<CoopFeed>,
    subscribers: usize,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let active = self.inner.coops.lock().map(|coops| coops.len()).unwrap_or(0);
        f.debug_struct("Hub").field("active_coops", &active).field("settings", &self.inner.settings).finish()
    }
}

impl Hub {
    /// Starts the hub's signal task; must be called within a Tokio runtime.
    pub(crate) fn start(reads: Arc<dyn EventReads>, feed: &dyn EventFeed, settings: HubSettings) -> Self {
        let mut signals = feed.subscribe();
        let (stop, mut stopped) = watch::channel(());
        let inner = Arc::new(HubInner { reads, settings, coops: Mutex::new(HashMap::new()), _stop: stop });
        let hub = Arc::downgrade(&inner);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped.changed() => return,
                    signal = signals.recv() => {
                        let Some(inner) = hub.upgrade() else { return };
                        match signal {
                            Ok(signal) => inner.wake(&signal.coop_id),
                            Err(RecvError::Lagged(missed)) => {
                                // Any coop may have advanced: let every fetcher re-read its outbox.
                                tracing::debug!(missed, "event signals lagged; re-checking every active coop");
                                inner.wake_all();
                            }
                            Err(RecvError::Closed) => return,
                        }
                    }
                }
            }
        });
        Self { inner }
    }

    /// Subscribes to a coop's head, starting its fetcher when it is the first subscriber.
    pub(crate) fn subscribe(&self, coop: &CoopId) -> Subscription {
        let mut coops = self.inner.coops.lock().expect("hub map poisoned");
        let feed = match coops.entry(coop.clone()) {
            Entry::Occupied(mut entry) => {
                entry.get_mut().subscribers += 1;
                entry.get().feed.clone()
            }
            Entry::Vacant(entry) => {
                let feed = Arc::new(CoopFeed::new(coop.clone()));
                tokio::spawn(fetch(self.inner.reads.clone(), feed.clone(), self.inner.settings));
                entry.insert(CoopEntry { feed: feed.clone(), subscribers: 1 });
                feed
            }
        };
        drop(coops);
        let head = feed.head.subscribe();
        Subscription { hub: self.inner.clone(), feed, head }
    }

    /// Number of coops with at least one subscriber.
    #[cfg(test)]
    pub(crate) fn active_coops(&self) -> usize {
        self.inner.coops.lock().expect("hub map poisoned").len()
    }
}

impl HubInner {
    fn wake(&self, coop: &CoopId) {
        if let Some(entry) = self.coops.lock().expect("hub map poisoned").get(coop) {
            entry.feed.wake.notify_one();
        }
    }

    fn wake_all(&self) {
        for entry in self.coops.lock().expect("hub map poisoned").values() {
            entry.feed.wake.notify_one();
        }
    }
}

/// What the hub knows of one active coop.
struct CoopFeed {
    coop: CoopId,
    /// The highest sequence number the fetcher has read (and cached).
    head: watch::Sender<u64>,
    cache: RwLock<EventCache>,
    wake: Notify,
    /// Set when the last subscriber left; the fetcher then stops.
    closed: AtomicBool,
}

impl CoopFeed {
    fn new(coop: CoopId) -> Self {
        Self {
            coop,
            head: watch::Sender::new(0),
            cache: RwLock::new(EventCache::default()),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn advance(&self, seq: u64) {
        self.head.send_if_modified(|head| {
            let newer = seq > *head;
            if newer {
                *head = seq;
            }
            newer
        });
    }
}

/// A connection's view of its coop: the head to wait on and the shared cache to read from.
pub(crate) struct Subscription {
    hub: Arc<HubInner>,
    feed: Arc<CoopFeed>,
    head: watch::Receiver<u64>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("coop", &self.feed.coop).field("head", &*self.head.borrow()).finish()
    }
}

impl Subscription {
    /// The highest sequence number known to be committed, marking it seen.
    pub(crate) fn head(&mut self) -> u64 {
        *self.head.borrow_and_update()
    }

    /// Resolves when the head moves past the value last returned by [`Self::head`].
    pub(crate) async fn changed(&mut self) {
        if self.head.changed().await.is_err() {
            // The sender lives as long as the feed we hold: unreachable, but never spin.
            std::future::pending::<()>().await;
        }
    }

    /// Appends the cached frames of events `from ..` (at most `max`) to `out` as
    /// `(seq, frame)` pairs, stopping before the first event that removes `watch`'s DID;
    /// returns how many, and the sequence number of that removal when the copy stopped at it.
    /// `(0, None)` when `from` is not cached.
    pub(crate) fn read_cached(
        &self,
        from: u64,
        max: usize,
        watch: Option<Watch<'_>>,
        out: &mut impl Extend<(u64, Utf8Bytes)>,
    ) -> (usize, Option<u64>) {
        self.feed.cache.read().expect("cache poisoned").copy_from(from, max, watch, out)
    }

    /// The first cached event in `(watch.after, upto]` that removes `watch`'s DID. Removals
    /// older than the cache are not seen here (a connection meets them when it reads them).
    pub(crate) fn removal(&self, watch: Watch<'_>, upto: u64) -> Option<u64> {
        self.feed.cache.read().expect("cache poisoned").first_removal(watch, upto)
    }
}

/// Whose removal from the coop a connection looks out for: its DID, and the sequence number
/// after which a `MemberRemoved` of that DID counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch<'a> {
    /// The connection's DID.
    pub(crate) did: &'a str,
    /// Removals with a greater sequence number count.
    pub(crate) after: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut coops = self.hub.coops.lock().expect("hub map poisoned");
        if let Some(entry) = coops.get_mut(&self.feed.coop)
            && Arc::ptr_eq(&entry.feed, &self.feed)
        {
            entry.subscribers -= 1;
            if entry.subscribers == 0 {
                coops.remove(&self.feed.coop);
                self.feed.closed.store(true, Ordering::SeqCst);
                self.feed.wake.notify_one();
            }
        }
    }
}

/// The fetcher of one coop: reads its outbox by sequence number whenever woken (or polled),
/// caches the rendered frames and publishes the new head.
async fn fetch(reads: Arc<dyn EventReads>, feed: Arc<CoopFeed>, settings: HubSettings) {
    let mut head = loop {
        if feed.closed.load(Ordering::SeqCst) {
            return;
        }
        match reads.current_seq(&feed.coop).await {
            Ok(seq) => break seq,
            Err(err) => {
                tracing::warn!(coop = %feed.coop, "event stream: cannot read the current sequence: {err}");
                tokio::time::sleep(RETRY_AFTER_FAILURE).await;
            }
        }
    };
    feed.advance(head);
    loop {
        tokio::select! {
            () = feed.wake.notified() => {}
            () = tokio::time::sleep(settings.poll_interval) => {}
        }
        if feed.closed.load(Ordering::SeqCst) {
            return;
        }
        loop {
            match reads.events_after(&feed.coop, head, settings.read_batch).await {
                Ok(events) => {
                    let Some(last) = events.last().map(|e| e.seq) else { break };
                    let full = events.len() >= settings.read_batch as usize;
                    {
                        let mut cache = feed.cache.write().expect("cache poisoned");
                        for event in &events {
                            cache.push(event.seq, render_event(event), removed_member(event).as_deref(), settings);
                        }
                    }
                    head = last;
                    feed.advance(head);
                    if !full {
                        break;
                    }
                }
                Err(err) => {
                    // The next signal or poll retries; connections keep their cursor meanwhile.
                    tracing::warn!(coop = %feed.coop, "event stream: cannot read the outbox: {err}");
                    break;
                }
            }
        }
    }
}

/// The rendered frames of a coop's most recent events, contiguous by sequence number.
#[derive(Debug, Default)]
struct EventCache {
    first_seq: u64,
    frames: VecDeque<Utf8Bytes>,
    bytes: usize,
    /// The `MemberRemoved` events among `frames`, by sequence number, with the DID each
    /// removes. Few: a scan is cheaper than an index.
    removals: VecDeque<(u64, Box<str>)>,
}

impl EventCache {
    fn next_seq(&self) -> u64 {
        self.first_seq + self.frames.len() as u64
    }

    fn push(&mut self, seq: u64, frame: Utf8Bytes, removes: Option<&str>, settings: HubSettings) {
        if self.frames.is_empty() || seq != self.next_seq() {
            // A gap (events pruned before we read them) or the first event: restart the run.
            self.frames.clear();
            self.removals.clear();
            self.bytes = 0;
            self.first_seq = seq;
        }
        self.bytes += frame.len();
        self.frames.push_back(frame);
        if let Some(did) = removes {
            self.removals.push_back((seq, did.into()));
        }
        while self.frames.len() > settings.cache_events.max(1)
            || (self.bytes > settings.cache_bytes && self.frames.len() > 1)
        {
            if let Some(old) = self.frames.pop_front() {
                self.bytes -= old.len();
                self.first_seq += 1;
            }
        }
        while self.removals.front().is_some_and(|(seq, _)| *seq < self.first_seq) {
            self.removals.pop_front();
        }
    }

    fn first_removal(&self, watch: Watch<'_>, upto: u64) -> Option<u64> {
        self.removals
            .iter()
            .find(|(seq, did)| *seq > watch.after && *seq <= upto && &**did == watch.did)
            .map(|(seq, _)| *seq)
    }

    fn copy_from(
        &self,
        from: u64,
        max: usize,
        watch: Option<Watch<'_>>,
        out: &mut impl Extend<(u64, Utf8Bytes)>,
    ) -> (usize, Option<u64>) {
        if from < self.first_seq || from >= self.next_seq() {
            return (0, None);
        }
        let start = (from - self.first_seq) as usize;
        let mut n = max.min(self.frames.len() - start);
        let removal = watch.and_then(|watch| {
            let after = watch.after.max(from - 1);
            self.first_removal(Watch { after, ..watch }, from + n as u64 - 1)
        });
        if let Some(seq) = removal {
            n = (seq - from) as usize;
        }
        out.extend(self.frames.range(start..start + n).enumerate().map(|(i, f)| (from + i as u64, f.clone())));
        (n, removal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeStore;

    fn settings(cache_events: usize, cache_bytes: usize) -> HubSettings {
        HubSettings { read_batch: 4, cache_events, cache_bytes, poll_interval: Duration::from_secs(5) }
    }

    fn frames(cache: &EventCache, from: u64, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        cache.copy_from(from, max, None, &mut out);
        out.into_iter().map(|(seq, _)| seq).collect()
    }

    #[test]
    fn the_cache_keeps_a_contiguous_window() {
        let s = settings(3, 1 << 20);
        let mut cache = EventCache::default();
        assert!(frames(&cache, 1, 10).is_empty());
        for seq in 1..=5 {
            cache.push(seq, Utf8Bytes::from(format!("e{seq}")), None, s);
        }
        assert_eq!(frames(&cache, 2, 10), Vec::<u64>::new(), "evicted");
        assert_eq!(frames(&cache, 3, 10), vec![3, 4, 5]);
        assert_eq!(frames(&cache, 4, 1), vec![4]);
        assert!(frames(&cache, 6, 10).is_empty(), "not yet there");
        // A gap restarts the window rather than serving a hole.
        cache.push(9, Utf8Bytes::from("e9"), None, s);
        assert!(frames(&cache, 5, 10).is_empty());
        assert_eq!(frames(&cache, 9, 10), vec![9]);
    }

    #[test]
    fn the_cache_is_bounded_by_bytes() {
        let s = settings(100, 10);
        let mut cache = EventCache::default();
        for seq in 1..=5 {
            cache.push(seq, Utf8Bytes::from("abcd"), None, s);
        }
        assert!(frames(&cache, 3, 10).is_empty());
        assert_eq!(frames(&cache, 4, 10), vec![4, 5]);
        assert_eq!(cache.bytes, 8);
    }

    #[test]
    fn the_cache_notes_removals_and_copies_stop_before_the_watched_one() {
        let s = settings(4, 1 << 20);
        let mut cache = EventCache::default();
        for seq in 1..=4 {
            let removes = match seq {
                2 => Some("did:key:zA"),
                3 => Some("did:key:zB"),
                _ => None,
            };
            cache.push(seq, Utf8Bytes::from(format!("e{seq}")), removes, s);
        }
        let watch = |did, after| Some(Watch { did, after });
        let mut out = Vec::new();
        assert_eq!(cache.copy_from(1, 10, watch("did:key:zB", 0), &mut out), (2, Some(3)));
        assert_eq!(out.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), vec![1, 2], "zA's removal is not zB's");
        assert_eq!(cache.copy_from(3, 10, watch("did:key:zB", 0), &mut Vec::new()), (0, Some(3)));
        // A removal up to `after` predates the watch.
        assert_eq!(cache.copy_from(1, 10, watch("did:key:zB", 3), &mut Vec::new()), (4, None));
        assert_eq!(cache.copy_from(1, 10, None, &mut Vec::new()), (4, None));
        assert_eq!(cache.first_removal(Watch { did: "did:key:zA", after: 0 }, 4), Some(2));
        assert_eq!(cache.first_removal(Watch { did: "did:key:zA", after: 0 }, 1), None, "beyond `upto`");
        // Eviction forgets the removals it evicts.
        cache.push(5, Utf8Bytes::from("e5"), None, s);
        cache.push(6, Utf8Bytes::from("e6"), None, s);
        assert_eq!(cache.first_removal(Watch { did: "did:key:zA", after: 0 }, 6), None);
        assert_eq!(cache.first_removal(Watch { did: "did:key:zB", after: 0 }, 6), Some(3));
        // So does a restart after a gap.
        cache.push(9, Utf8Bytes::from("e9"), None, s);
        assert_eq!(cache.first_removal(Watch { did: "did:key:zB", after: 0 }, 9), None);
    }

    #[tokio::test(start_paused = true)]
    async fn subscribers_share_one_fetcher_and_see_the_head_move() {
        let store = FakeStore::new();
        let coop = CoopId::parse("c1").unwrap();
        store.append(&coop, 3);
        let hub = Hub::start(store.clone(), store.as_ref(), settings(16, 1 << 20));
        let mut a = hub.subscribe(&coop);
        let mut b = hub.subscribe(&coop);
        assert_eq!(hub.active_coops(), 1);
        while a.head() < 3 {
            a.changed().await;
        }
        let reads_before = store.reads_after();
        store.append(&coop, 2);
        while a.head() < 5 || b.head() < 5 {
            tokio::select! { () = a.changed() => {}, () = b.changed() => {} }
        }
        assert_eq!(store.reads_after() - reads_before, 1, "one store read for both subscribers");
        let mut out = Vec::new();
        assert_eq!(b.read_cached(4, 10, None, &mut out), (2, None));
        assert_eq!(out[0].0, 4);
        assert!(out[0].1.as_str().contains(r#""seq":4"#));
        drop(a);
        assert_eq!(hub.active_coops(), 1);
        drop(b);
        assert_eq!(hub.active_coops(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_signal_is_covered_by_the_poll() {
        let store = FakeStore::new();
        let coop = CoopId::parse("c1").unwrap();
        let hub = Hub::start(store.clone(), store.as_ref(), settings(16, 1 << 20));
        let mut sub = hub.subscribe(&coop);
        tokio::time::sleep(Duration::from_millis(1)).await;
        store.append_silently(&coop, 2);
        let started = tokio::time::Instant::now();
        while sub.head() < 2 {
            sub.changed().await;
        }
        assert!(started.elapsed() <= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lagged_feed_rechecks_every_coop() {
        let store = FakeStore::with_feed_capacity(1);
        let (c1, c2) = (CoopId::parse("c1").unwrap(), CoopId::parse("c2").unwrap());
        let hub = Hub::start(store.clone(), store.as_ref(), settings(16, 1 << 20));
        let mut s1 = hub.subscribe(&c1);
        let mut s2 = hub.subscribe(&c2);
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Three signals into a channel of one: the hub's receiver lags and must wake both coops.
        store.append(&c1, 1);
        store.append(&c2, 1);
        store.append(&c2, 1);
        let started = tokio::time::Instant::now();
        while s1.head() < 1 || s2.head() < 2 {
            tokio::select! { () = s1.changed() => {}, () = s2.changed() => {} }
        }
        assert!(started.elapsed() < Duration::from_secs(1), "woken by the lag, not by the poll");
    }
}
