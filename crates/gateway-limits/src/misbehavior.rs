//! Misbehaviour tracking and the automatic quarantine of client addresses.
//!
//! A client that keeps presenting crafted credentials (bad login signatures, forged tokens,
//! replayed challenges) is not just unlucky: an address with `threshold` such violations within
//! `window` is quarantined for `quarantine` (INTERFACE.md §10: 50 within 5 minutes, 15 minutes).
//! Every violation counts in the violations counter by type, each quarantine in the auto-bans
//! counter and is logged once, at warn, here (so whichever transport reported the violation, the
//! quarantine is logged the same way); the addresses quarantined now are the quarantined-peers
//! gauge ([`Misbehavior::export_quarantined_now`]). Their names are [`crate::MetricNames`]'.
//!
//! Only violations that need a crafted credential count toward a quarantine
//! ([`Violation::counts_toward_quarantine`]). A hostile web page can make its visitors' browsers
//! send binary WebSocket frames or oversized cross-site POSTs, so those (`ws_protocol`,
//! `oversized_body`) are counted in the metric only: were they to count, any page could have a
//! whole office's NAT address quarantined.
//!
//! Addresses are keyed like the IP limiter's (IPv6 by its /64), and the table is bounded like
//! the limiters': an address that does not fit is simply not tracked. This module decides
//! nothing about which addresses are exempt (the gateway never records its trusted proxies) and
//! answers no requests; it only counts and remembers.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::clock::{Clock, now_nanos, to_nanos};
use crate::keyed::DEFAULT_MAX_KEYS;
use crate::policy::ip_key;
use crate::table::{Expiring, Table};

/// The client's address as the gateway's edge decided it (the peer, or what a trusted proxy
/// forwarded), left on each request for whatever later reports a violation; `exempt` when the
/// address is a trusted proxy, which is never quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress {
    /// The client's address.
    pub ip: IpAddr,
    /// Whether violations by this address are not counted (a trusted proxy).
    pub exempt: bool,
}

/// A kind of protocol violation by a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A login signature that verifies against no challenge of the DID.
    BadSignature,
    /// A bearer token that is not one the gateway issued (bad signature, algorithm, issuer).
    ForgedToken,
    /// A login against a challenge that was never issued, is consumed, or expired.
    ReplayedChallenge,
    /// A WebSocket protocol violation (unmasked or reserved bits, bad opcode, invalid UTF-8, an
    /// oversized message).
    WsProtocol,
    /// A body over the limit.
    OversizedBody,
    /// A request signature that does not verify, or a replayed signature nonce.
    BadRequestSignature,
}

impl Violation {
    /// Every kind, for registering the metric's label values.
    pub const ALL: [Violation; 6] = [
        Violation::BadSignature,
        Violation::ForgedToken,
        Violation::ReplayedChallenge,
        Violation::WsProtocol,
        Violation::OversizedBody,
        Violation::BadRequestSignature,
    ];

    /// Whether this kind counts toward a quarantine: only those that need a crafted credential
    /// (`bad_signature`, `forged_token`, `replayed_challenge`, INTERFACE.md §10). What a hostile page
    /// can make a visitor's browser send (a binary WebSocket frame, an oversized body) must not
    /// get the visitor's address quarantined; nor does a bad request signature, which the
    /// interface does not list among the counting kinds.
    pub const fn counts_toward_quarantine(self) -> bool {
        matches!(self, Violation::BadSignature | Violation::ForgedToken | Violation::ReplayedChallenge)
    }

    /// The metric label (`violation_type`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Violation::BadSignature => "bad_signature",
            Violation::ForgedToken => "forged_token",
            Violation::ReplayedChallenge => "replayed_challenge",
            Violation::WsProtocol => "ws_protocol",
            Violation::OversizedBody => "oversized_body",
            Violation::BadRequestSignature => "bad_request_signature",
        }
    }
}

/// When an address is quarantined, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantinePolicy {
    /// Violations within `window` that start a quarantine.
    pub threshold: NonZeroU32,
    /// The sliding window the violations are counted in.
    pub window: Duration,
    /// How long a quarantine lasts.
    pub quarantine: Duration,
}

impl Default for QuarantinePolicy {
    /// INTERFACE.md §10: 50 violations within 5 minutes quarantine an address for 15 minutes.
    fn default() -> Self {
        Self {
            threshold: NonZeroU32::new(50).expect("non-zero"),
            window: Duration::from_secs(300),
            quarantine: Duration::from_secs(900),
        }
    }
}

/// One address's recent violations and quarantine.
#[derive(Debug, Default)]
struct Record {
    /// Times of the violations within the window, oldest first (at most `threshold`).
    times: VecDeque<u64>,
    /// Until when the address is quarantined (0: not).
    until: u64,
    /// The window, kept here so that `idle_at` needs no policy.
    window: u64,
}

impl Expiring for Record {
    fn idle_at(&self) -> u64 {
        let last = self.times.back().map_or(0, |&t| t.saturating_add(self.window));
        last.max(self.until)
    }
}

/// Violations per client address, and the addresses quarantined for them.
#[derive(Debug)]
pub struct Misbehavior<C> {
    table: Table<IpAddr, Record>,
    clock: C,
    policy: QuarantinePolicy,
}

impl<C: Clock> Misbehavior<C> {
    /// A tracker for up to [`DEFAULT_MAX_KEYS`] addresses.
    pub fn new(clock: C, policy: QuarantinePolicy) -> Self {
        Self::bounded(clock, policy, DEFAULT_MAX_KEYS)
    }

    /// A tracker for up to `max_keys` addresses.
    pub fn bounded(clock: C, policy: QuarantinePolicy, max_keys: NonZeroUsize) -> Self {
        Self { table: Table::new(max_keys), clock, policy }
    }

    /// How long `ip` stays quarantined, if it is quarantined now.
    pub fn quarantined_for(&self, ip: IpAddr) -> Option<Duration> {
        let now = now_nanos(&self.clock);
        let until = self.table.update(&ip_key(ip), now, |record| record.until).ok()?;
        (until > now).then(|| Duration::from_nanos(until - now))
    }

    /// Counts one violation by `ip` in the metric and, when its kind counts toward a
    /// quarantine, against the address; returns the quarantine's length when this violation
    /// started one. A quarantine begun here is logged (once, at warn) and counted here, and the
    /// gauge of quarantined addresses updated.
    pub fn record(&self, ip: IpAddr, violation: Violation) -> Option<Duration> {
        metrics::counter!(crate::metric_names().violations_total, "violation_type" => violation.as_str()).increment(1);
        if !violation.counts_toward_quarantine() {
            return None;
        }
        let now = now_nanos(&self.clock);
        let window = to_nanos(self.policy.window);
        let threshold = self.policy.threshold.get() as usize;
        let quarantine = to_nanos(self.policy.quarantine);
        let banned = self
            .table
            .update(&ip_key(ip), now, |record| {
                record.window = window;
                if record.until > now {
                    // Already quarantined: the quarantine is not extended, so it always ends.
                    return false;
                }
                // Violations at least a window old no longer count (none can be, before the
                // clock has run a whole window).
                if let Some(cutoff) = now.checked_sub(window) {
                    while record.times.front().is_some_and(|&t| t <= cutoff) {
                        record.times.pop_front();
                    }
                }
                record.times.push_back(now);
                if record.times.len() >= threshold {
                    record.times.clear();
                    record.until = now.saturating_add(quarantine);
                    return true;
                }
                false
            })
            .unwrap_or(false);
        if banned {
            metrics::counter!(crate::metric_names().auto_bans_total).increment(1);
            self.export_quarantined_now();
            tracing::warn!(
                client = %ip,
                violation = violation.as_str(),
                quarantine_secs = self.policy.quarantine.as_secs(),
                "client quarantined after repeated protocol violations"
            );
            Some(self.policy.quarantine)
        } else {
            None
        }
    }

    /// How many addresses are quarantined now (a scan; call it from a timer, for the gauge).
    pub fn quarantined_now(&self) -> usize {
        let now = now_nanos(&self.clock);
        self.table.count(|record| record.until > now)
    }

    /// Sets the quarantined-peers gauge ([`crate::MetricNames`]) to [`Misbehavior::quarantined_now`]
    /// and returns it. Called when a quarantine begins and by the binary before each scrape
    /// (and on a timer), so the gauge goes down as quarantines expire.
    pub fn export_quarantined_now(&self) -> usize {
        let count = self.quarantined_now();
        metrics::gauge!(crate::metric_names().quarantined_peers).set(count as f64);
        count
    }

    /// Drops addresses with nothing left to remember; returns how many went.
    pub fn evict_idle(&self) -> usize {
        self.table.evict_idle(now_nanos(&self.clock))
    }

    /// The policy in force.
    pub fn policy(&self) -> QuarantinePolicy {
        self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn tracker(threshold: u32) -> (ManualClock, Misbehavior<ManualClock>) {
        let clock = ManualClock::new();
        let policy = QuarantinePolicy {
            threshold: NonZeroU32::new(threshold).unwrap(),
            window: Duration::from_secs(300),
            quarantine: Duration::from_secs(900),
        };
        (clock.clone(), Misbehavior::new(clock, policy))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn fifty_violations_within_five_minutes_quarantine_for_fifteen() {
        let (clock, tracker) = tracker(50);
        let addr = ip("203.0.113.9");
        for n in 0..49 {
            assert_eq!(tracker.record(addr, Violation::BadSignature), None, "violation {n}");
            clock.advance(Duration::from_secs(6)); // 49 × 6 s = 294 s: all within the window
        }
        assert_eq!(tracker.quarantined_for(addr), None);
        assert_eq!(tracker.record(addr, Violation::ForgedToken), Some(Duration::from_secs(900)));
        assert_eq!(tracker.quarantined_for(addr), Some(Duration::from_secs(900)));
        assert_eq!(tracker.quarantined_now(), 1);
        clock.advance(Duration::from_secs(899));
        assert_eq!(tracker.record(addr, Violation::BadSignature), None, "a quarantine is not extended");
        assert_eq!(tracker.quarantined_for(addr), Some(Duration::from_secs(1)));
        clock.advance(Duration::from_secs(1));
        assert_eq!(tracker.quarantined_for(addr), None, "over after fifteen minutes");
        assert_eq!(tracker.quarantined_now(), 0);
    }

    #[test]
    fn violations_spread_wider_than_the_window_never_quarantine() {
        let (clock, tracker) = tracker(50);
        let addr = ip("203.0.113.10");
        for _ in 0..500 {
            assert_eq!(tracker.record(addr, Violation::BadSignature), None);
            clock.advance(Duration::from_secs(7)); // 49 within any 300 s at most
        }
        assert_eq!(tracker.quarantined_for(addr), None);
    }

    #[test]
    fn addresses_are_kept_apart_and_ipv6_by_its_64() {
        let (_, tracker) = tracker(3);
        for n in 0..3u16 {
            tracker.record(IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, n]), Violation::ReplayedChallenge);
        }
        assert!(tracker.quarantined_for(ip("2001:db8:0:1::ffff")).is_some(), "one /64, one address");
        assert!(tracker.quarantined_for(ip("2001:db8:0:2::1")).is_none());
        assert!(tracker.quarantined_for(ip("203.0.113.1")).is_none());
    }

    #[test]
    fn idle_addresses_are_forgotten() {
        let (clock, tracker) = tracker(3);
        tracker.record(ip("198.51.100.1"), Violation::ForgedToken);
        clock.advance(Duration::from_secs(301));
        assert_eq!(tracker.evict_idle(), 1);
    }

    /// A hostile page can make a visitor's browser send binary frames and oversized bodies as
    /// fast as it likes: none of it may quarantine the visitor's address (a whole office NAT).
    #[test]
    fn what_a_browser_can_be_made_to_send_never_quarantines() {
        let (clock, tracker) = tracker(50);
        let office = ip("198.51.100.77");
        for _ in 0..10_000 {
            for violation in [Violation::WsProtocol, Violation::OversizedBody, Violation::BadRequestSignature] {
                assert!(!violation.counts_toward_quarantine(), "{}", violation.as_str());
                assert_eq!(tracker.record(office, violation), None);
            }
        }
        assert_eq!(tracker.quarantined_for(office), None);
        assert_eq!(tracker.quarantined_now(), 0);
        assert_eq!(tracker.evict_idle(), 0, "nothing about the address was even remembered");
        // Nor do they fill up the count of the violations that do count: 49 crafted credentials
        // among them still fall one short.
        for _ in 0..49 {
            assert_eq!(tracker.record(office, Violation::ReplayedChallenge), None);
            assert_eq!(tracker.record(office, Violation::OversizedBody), None);
            assert_eq!(tracker.record(office, Violation::WsProtocol), None);
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(tracker.quarantined_for(office), None);
        assert_eq!(tracker.record(office, Violation::BadSignature), Some(Duration::from_secs(900)));
    }

    #[test]
    fn only_crafted_credentials_count() {
        let counting: Vec<_> =
            Violation::ALL.iter().filter(|v| v.counts_toward_quarantine()).map(|v| v.as_str()).collect();
        assert_eq!(counting, ["bad_signature", "forged_token", "replayed_challenge"]);
    }
}
