//! Every denial, and only a denial, increments `icn_gateway_rate_limit_exceeded_total` under
//! its layer's label.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gateway_limits::{
    DidTier, ManualClock, RATE_LIMIT_EXCEEDED_TOTAL, TrustClass, VelocityLimiter, did_limiter, ip_limiter, ip_quota,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};

/// A recorder keeping counters in memory, installed for one closure at a time.
#[derive(Default)]
struct CountingRecorder {
    counters: Mutex<HashMap<Key, Arc<AtomicU64>>>,
}

impl CountingRecorder {
    fn denials(&self, layer: &'static str) -> u64 {
        let key = Key::from_parts(RATE_LIMIT_EXCEEDED_TOTAL, vec![Label::new("layer", layer)]);
        self.counters.lock().unwrap().get(&key).map_or(0, |c| c.load(Ordering::SeqCst))
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

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
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
