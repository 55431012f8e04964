//! The gateway's three limiting layers expressed as quotas: per IP, per DID by trust tier, and
//! per payer by trust class.
//!
//! These are the numbers of the specification and nothing else: this module reads no trust
//! scores and keeps no state. Scores come from a [`TrustScores`](crate::TrustScores)
//! implementation and state lives in [`KeyedLimiter`] and [`VelocityLimiter`](crate::VelocityLimiter).

use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU32;

use crate::clock::Clock;
use crate::keyed::KeyedLimiter;
use crate::quota::Quota;

/// The `layer` label of denials by the per-IP limiter.
pub const LAYER_IP: &str = "ip";
/// The `layer` label of denials by the per-DID limiter.
pub const LAYER_DID: &str = "did";
/// The `layer` label of denials by the velocity limiter.
pub const LAYER_VELOCITY: &str = "velocity";

const fn nz(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => panic!("quota constants are non-zero"),
    }
}

/// The per-IP quota of the public reads (coop stats, DID resolution, the WebSocket upgrade): a
/// burst of 120 requests, refilled at 20 per second. A bucket of its own, so that a dashboard
/// polling public figures never uses up the logins of its address, and roomier than the login
/// bucket because these answers cost one indexed read and give nothing to guess.
pub const fn public_read_quota() -> Quota {
    Quota::with_burst_and_rate(nz(120), nz(20))
}

/// The per-IP quota: a burst of 20 requests, refilled at 2 per second.
pub const fn ip_quota() -> Quota {
    Quota::with_burst_and_rate(nz(20), nz(2))
}

/// The per-IP limiter type.
pub type IpLimiter<C> = KeyedLimiter<IpAddr, C>;

/// The per-DID limiter type. Keys are boxed strings (16 bytes instead of a `String`'s 24) and
/// are looked up by `&str`, so a check allocates only for a DID it has not seen.
pub type DidLimiter<C> = KeyedLimiter<Box<str>, C>;

/// The key a client address is counted under: an IPv4 address as itself (also when it arrives
/// IPv4-mapped, `::ffff:a.b.c.d`), an IPv6 address by its /64 prefix, since one holder of a /64
/// (the usual end-site assignment) can use any of its 2^64 addresses.
pub fn ip_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// A per-IP limiter whose denials are counted under `layer="ip"`.
pub fn ip_limiter<C: Clock>(clock: C) -> IpLimiter<C> {
    KeyedLimiter::new(clock).with_metric_layer(LAYER_IP)
}

/// A per-DID limiter whose denials are counted under `layer="did"`.
pub fn did_limiter<C: Clock>(clock: C) -> DidLimiter<C> {
    KeyedLimiter::new(clock).with_metric_layer(LAYER_DID)
}

/// The request allowance of a token's DID, chosen by its trust score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DidTier {
    /// Score 0.8 and above: 1000 requests per minute.
    High,
    /// Score in [0.5, 0.8): 500 requests per minute.
    Medium,
    /// Score in [0.3, 0.5): 100 requests per minute.
    Low,
    /// Score below 0.3, or not a number: 10 requests per minute.
    Minimal,
}

impl DidTier {
    /// The tier of a trust score. A score that is not a number gets the lowest tier, so a
    /// broken score source can never raise a limit.
    pub fn from_score(score: f64) -> Self {
        if score >= 0.8 {
            Self::High
        } else if score >= 0.5 {
            Self::Medium
        } else if score >= 0.3 {
            Self::Low
        } else {
            Self::Minimal
        }
    }

    /// The tier's allowance, which is also its `X-RateLimit-Limit`.
    pub const fn requests_per_minute(self) -> u32 {
        self.per_minute().get()
    }

    /// The tier's quota: the whole minute's allowance may be used at once and refills evenly
    /// over the minute.
    pub const fn quota(self) -> Quota {
        Quota::per_minute(self.per_minute())
    }

    const fn per_minute(self) -> NonZeroU32 {
        match self {
            Self::High => nz(1000),
            Self::Medium => nz(500),
            Self::Low => nz(100),
            Self::Minimal => nz(10),
        }
    }
}

/// The payment velocity class of a payer, chosen by its trust score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrustClass {
    /// Score below 0.1, or not a number: 10 transactions per hour.
    Isolated,
    /// Score in [0.1, 0.4): 50 transactions per hour.
    Known,
    /// Score in [0.4, 0.7): 100 transactions per hour.
    Partner,
    /// Score 0.7 and above: 200 transactions per hour.
    Federated,
}

impl TrustClass {
    /// The class of a trust score. A score that is not a number is `Isolated`, so a broken
    /// score source can never raise a limit.
    pub fn from_score(score: f64) -> Self {
        if score >= 0.7 {
            Self::Federated
        } else if score >= 0.4 {
            Self::Partner
        } else if score >= 0.1 {
            Self::Known
        } else {
            Self::Isolated
        }
    }

    /// The class name as the specification spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Isolated => "Isolated",
            Self::Known => "Known",
            Self::Partner => "Partner",
            Self::Federated => "Federated",
        }
    }

    /// How many payments the class may make in any one hour.
    pub const fn transactions_per_hour(self) -> u32 {
        self.hourly_limit().get()
    }

    /// [`transactions_per_hour`](Self::transactions_per_hour) as the non-zero limit a limiter takes.
    pub const fn hourly_limit(self) -> NonZeroU32 {
        match self {
            Self::Isolated => nz(10),
            Self::Known => nz(50),
            Self::Partner => nz(100),
            Self::Federated => nz(200),
        }
    }
}

impl fmt::Display for TrustClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn below(x: f64) -> f64 {
        x.next_down()
    }

    #[test]
    fn did_tier_boundaries() {
        let cases = [
            (1.0, 1000),
            (0.8, 1000),
            (below(0.8), 500),
            (0.5, 500),
            (below(0.5), 100),
            (0.3, 100),
            (below(0.3), 10),
            (0.0, 10),
            (-1.0, 10),
            (f64::NAN, 10),
        ];
        for (score, per_minute) in cases {
            assert_eq!(DidTier::from_score(score).requests_per_minute(), per_minute, "score {score}");
        }
    }

    #[test]
    fn did_tier_boundaries_on_a_manual_clock() {
        let clock = ManualClock::new();
        let limiter = did_limiter(clock.clone());
        for (did, score, per_minute) in [
            ("did:key:a", 0.8, 1000),
            ("did:key:b", below(0.8), 500),
            ("did:key:c", 0.5, 500),
            ("did:key:d", below(0.5), 100),
            ("did:key:e", 0.3, 100),
            ("did:key:f", below(0.3), 10),
        ] {
            let quota = DidTier::from_score(score).quota();
            for i in 1..=per_minute {
                let admission = limiter.check(did, quota).unwrap();
                assert_eq!(admission.limit, per_minute);
                assert_eq!(admission.remaining, per_minute - i);
            }
            let denial = limiter.check(did, quota).unwrap_err();
            assert_eq!(denial.limit, per_minute);
            assert_eq!(denial.retry_after, Duration::from_secs(60) / per_minute, "{did}");
        }
    }

    #[test]
    fn trust_class_boundaries() {
        let cases = [
            (1.0, TrustClass::Federated, 200),
            (0.7, TrustClass::Federated, 200),
            (below(0.7), TrustClass::Partner, 100),
            (0.4, TrustClass::Partner, 100),
            (below(0.4), TrustClass::Known, 50),
            (0.1, TrustClass::Known, 50),
            (below(0.1), TrustClass::Isolated, 10),
            (0.0, TrustClass::Isolated, 10),
            (f64::NAN, TrustClass::Isolated, 10),
        ];
        for (score, class, per_hour) in cases {
            assert_eq!(TrustClass::from_score(score), class, "score {score}");
            assert_eq!(class.transactions_per_hour(), per_hour);
        }
    }

    #[test]
    fn trust_class_names() {
        let names = [TrustClass::Isolated, TrustClass::Known, TrustClass::Partner, TrustClass::Federated]
            .map(TrustClass::as_str);
        assert_eq!(names, ["Isolated", "Known", "Partner", "Federated"]);
        assert_eq!(TrustClass::Partner.to_string(), "Partner");
    }

    #[test]
    fn ipv6_is_counted_by_its_64_prefix_and_mapped_ipv4_as_ipv4() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        assert_eq!(ip_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), ip("2001:db8:1:2::"));
        assert_eq!(ip_key(ip("2001:db8:1:2::1")), ip_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
        assert_ne!(ip_key(ip("2001:db8:1:2::1")), ip_key(ip("2001:db8:1:3::1")));
        assert_eq!(ip_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(ip_key(ip("192.0.2.7")), ip("192.0.2.7"));
        // One /64 shares one bucket: a burst spread over its addresses is still one burst.
        let limiter = ip_limiter(ManualClock::new());
        for i in 0..20u16 {
            let address = ip(&format!("2001:db8:1:2::{i:x}"));
            assert!(limiter.check(&ip_key(address), ip_quota()).is_ok());
        }
        assert!(limiter.check(&ip_key(ip("2001:db8:1:2:dead:beef::1")), ip_quota()).is_err());
        assert!(limiter.check(&ip_key(ip("2001:db8:1:3::1")), ip_quota()).is_ok());
    }

    #[test]
    fn ip_layer_allows_a_burst_of_20_then_two_per_second() {
        let clock = ManualClock::new();
        let limiter = ip_limiter(clock.clone());
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        for i in 1..=20 {
            let admission = limiter.check(&ip, ip_quota()).unwrap();
            assert_eq!(admission.remaining, 20 - i);
        }
        let denial = limiter.check(&ip, ip_quota()).unwrap_err();
        assert_eq!(denial.retry_after, Duration::from_millis(500));
        assert_eq!(denial.retry_after_secs(), 1);
        clock.advance(Duration::from_millis(500));
        assert!(limiter.check(&ip, ip_quota()).is_ok());
        assert!(limiter.check(&ip, ip_quota()).is_err());
    }
}
