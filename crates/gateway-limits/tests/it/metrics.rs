//! Every denial, and only a denial, increments the denials counter under its layer's label;
//! every violation counts in the violations counter, and the quarantined-peers gauge follows the
//! quarantines, down as well as up; all under the crate's default names ([`MetricNames::DEFAULT`]),
//! which these tests never change.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gateway_limits::{
    DidTier, ManualClock, MetricNames, Misbehavior, QuarantinePolicy, TrustClass, VelocityLimiter, Violation,
    did_limiter, ip_limiter, ip_quota,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};

/// A recorder keeping counters and gauges in memory, installed for one closure at a time.
#[derive(Default)]
struct CountingRecorder {
    counters: Mutex<HashMap<Key, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<Key, Arc<AtomicU64>>>,
}

impl CountingRecorder {
    fn denials(&self, layer: &'static str) -> u64 {
        let key = Key::from_parts(MetricNames::DEFAULT.rate_limit_exceeded_total, vec![Label::new("layer", layer)]);
        self.counters.lock().unwrap().get(&key).map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn counter(&self, key: Key) -> u64 {
        self.counters.lock().unwrap().get(&key).map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn gauge(&self, name: &'static str) -> Option<f64> {
        let key = Key::from_name(name);
        self.gauges.lock().unwrap().get(&key).map(|g| f64::from_bits(g.load(Ordering::SeqCst)))
    }
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(key.clone()).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(key.clone()).or_default().clone())
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn each_layer_counts_its_denials() {
    let recorder = CountingRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let ip = ip_limiter(clock.clone());
        let did = did_limiter(clock.clone());
        let velocity = VelocityLimiter::new(clock);
        let client = IpAddr::V6(Ipv6Addr::LOCALHOST);

        for _ in 0..20 {
            assert!(ip.check(&client, ip_quota()).is_ok());
        }
        assert!(ip.check(&client, ip_quota()).is_err());
        assert!(ip.check(&client, ip_quota()).is_err());

        let quota = DidTier::from_score(0.0).quota();
        for _ in 0..10 {
            assert!(did.check("did:key:low", quota).is_ok());
        }
        assert!(did.check("did:key:low", quota).is_err());

        for _ in 0..10 {
            assert!(velocity.check("did:key:payer", TrustClass::Isolated).is_ok());
        }
        assert!(velocity.check("did:key:payer", TrustClass::Isolated).is_err());
    });
    assert_eq!(recorder.denials("ip"), 2);
    assert_eq!(recorder.denials("did"), 1);
    assert_eq!(recorder.denials("velocity"), 1);
}

/// Violations that cannot quarantine still count in the metric; the gauge of quarantined
/// addresses rises when one begins and falls when it expires.
#[test]
fn violations_count_and_the_quarantine_gauge_follows_expiry() {
    let names = MetricNames::DEFAULT;
    let recorder = CountingRecorder::default();
    let clock = ManualClock::new();
    let policy = QuarantinePolicy {
        threshold: std::num::NonZeroU32::new(3).unwrap(),
        window: std::time::Duration::from_secs(300),
        quarantine: std::time::Duration::from_secs(900),
    };
    let tracker = Misbehavior::new(clock.clone(), policy);
    let client: IpAddr = "203.0.113.50".parse().unwrap();
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..10 {
            assert_eq!(tracker.record(client, Violation::WsProtocol), None);
            assert_eq!(tracker.record(client, Violation::OversizedBody), None);
        }
        assert_eq!(tracker.export_quarantined_now(), 0);
        for _ in 0..3 {
            tracker.record(client, Violation::ForgedToken);
        }
    });
    let violations = |kind: Violation| {
        recorder.counter(Key::from_parts(names.violations_total, vec![Label::new("violation_type", kind.as_str())]))
    };
    assert_eq!(violations(Violation::WsProtocol), 10);
    assert_eq!(violations(Violation::OversizedBody), 10);
    assert_eq!(violations(Violation::ForgedToken), 3);
    assert_eq!(recorder.counter(Key::from_name(names.auto_bans_total)), 1);
    assert_eq!(recorder.gauge(names.quarantined_peers), Some(1.0), "set when the quarantine began");
    clock.advance(std::time::Duration::from_secs(900));
    metrics::with_local_recorder(&recorder, || assert_eq!(tracker.export_quarantined_now(), 0));
    assert_eq!(recorder.gauge(names.quarantined_peers), Some(0.0), "down once it expired");
}
