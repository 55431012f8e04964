//! The metrics a gateway exports (INTERFACE.md §10 "Metrics"), in one catalogue: every family with
//! its HELP text, registered at start so that a counter that has not moved yet already reads 0,
//! and served in the Prometheus text format with the process figures collected at each scrape.
//!
//! The families are recorded where their events happen, through the `metrics` facade; this
//! module installs the one process-wide recorder (with the request-duration histogram's
//! buckets), describes and zeroes them, and serves `/metrics`. Labels are bounded: the values
//! registered here are all the values the gateway ever uses, except the route templates and
//! statuses of the HTTP families and the currencies of the balance gauge (at most 100).

use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::get;
use gateway_limits::Violation;
use metrics::{describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

/// A metric family and the label values it is registered with at start.
struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// The label and every value it takes, or `None` for an unlabelled family (registered once).
    /// Families whose label values are not known in advance are described, not registered.
    labels: Option<(&'static str, &'static [&'static str])>,
    register: bool,
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

const LAYERS: &[&str] = &["ip", "did", "velocity"];

/// Every `reason` of `icn_gateway_auth_failures_total`: the token's (`gateway_auth::AuthError`)
/// and the login's refusals.
const AUTH_FAILURE_REASONS: &[&str] = &[
    "invalid_token",
    "token_expired",
    "unknown_challenge",
    "bad_signature",
    "invalid_did",
    "invalid_scope",
    "missing_coop_id",
    "invalid_coop_id",
    "invalid_signature_encoding",
    "scopes_refused",
    // Request signatures (INTERFACE.md §11): gateway_httpsig::Failure::reason.
    "signature_invalid",
    "signature_expired",
    "nonce_replayed",
    "digest_mismatch",
    "keyid_mismatch",
    "components_missing",
    "signature_required",
];

const VIOLATION_TYPES: &[&str] = &{
    let mut names = [""; Violation::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Violation::ALL[i].as_str();
        i += 1;
    }
    names
};

const fn family(
    name: &'static str,
    kind: Kind,
    help: &'static str,
    labels: Option<(&'static str, &'static [&'static str])>,
) -> Family {
    Family { name, kind, help, labels, register: true }
}

const fn described(name: &'static str, kind: Kind, help: &'static str) -> Family {
    Family { name, kind, help, labels: None, register: false }
}

/// The catalogue.
const FAMILIES: &[Family] = &[
    // HTTP, from the edge middleware (label values known only as requests arrive).
    described(
        gateway_http::edge::REQUESTS_TOTAL,
        Kind::Counter,
        "HTTP requests answered, by method, route template and status.",
    ),
    described(
        gateway_http::edge::REQUEST_DURATION,
        Kind::Histogram,
        "Seconds from a request's arrival to its response's head, by method and route template.",
    ),
    family(gateway_http::edge::REQUESTS_IN_FLIGHT, Kind::Gauge, "HTTP requests being handled now.", None),
    // Authentication and authorization.
    family(
        "icn_gateway_auth_failures_total",
        Kind::Counter,
        "Refused logins and bearer tokens, by reason.",
        Some(("reason", AUTH_FAILURE_REASONS)),
    ),
    family(
        "icn_gateway_authorization_failures_total",
        Kind::Counter,
        "Requests refused 403 (missing scope, another coop, quarantine, insufficient trust), by code.",
        Some(("code", &["AUTHORIZATION_FAILED", "INSUFFICIENT_TRUST"])),
    ),
    family(
        gateway_http::limits::METRIC_NAMES.rate_limit_exceeded_total,
        Kind::Counter,
        "Requests refused 429 by a rate-limit layer (ip, did or velocity).",
        Some(("layer", LAYERS)),
    ),
    family(
        gateway_http::limits::METRIC_NAMES.rate_limit_backend_errors_total,
        Kind::Counter,
        "Limit checks the shared backend (Redis) could not answer; each fell back or was refused 503.",
        Some(("layer", LAYERS)),
    ),
    family("icn_gateway_auth_challenges_total", Kind::Counter, "Login challenges issued.", None),
    family(
        "icn_gateway_auth_verifications_total",
        Kind::Counter,
        "Login verifications, by result.",
        Some(("result", &["success", "failure"])),
    ),
    // Misbehaviour.
    family(
        gateway_http::limits::METRIC_NAMES.violations_total,
        Kind::Counter,
        "Client protocol violations, by type; an address with too many is quarantined.",
        Some(("violation_type", VIOLATION_TYPES)),
    ),
    family(
        gateway_http::limits::METRIC_NAMES.auto_bans_total,
        Kind::Counter,
        "Client addresses quarantined for repeated protocol violations.",
        None,
    ),
    family(
        gateway_http::limits::METRIC_NAMES.quarantined_peers,
        Kind::Gauge,
        "Client addresses quarantined now.",
        None,
    ),
    // Backends.
    family(
        "icn_network_connections_active",
        Kind::Gauge,
        "Live connections to the gateway's backends: database connections plus Redis (1 while it answers).",
        None,
    ),
    family(
        "icn_network_messages_failed_total",
        Kind::Counter,
        "Backend operations that failed (the database or Redis unreachable, refusing or too slow).",
        Some(("backend", &["database", "redis"])),
    ),
    // Ledger.
    family(
        "icn_ledger_entries_quarantined",
        Kind::Gauge,
        "Ledger accounts whose balance does not reconcile with their transactions (should be 0).",
        None,
    ),
    described(
        "icn_ledger_balances_total",
        Kind::Gauge,
        "Sum of all balances per currency (zero-sum: should be 0); at most 100 currencies.",
    ),
    // The coops' logs.
    described(
        "icn_log_integrity_failures_total",
        Kind::Counter,
        "Checks of a coop's log whose stored entries or hashes no longer give its signed checkpoint, by coop; signing stops for that coop.",
    ),
    // Governance and compute.
    family(
        "icn_gateway_governance_proposals_closed_total",
        Kind::Counter,
        "Proposals closed, by outcome.",
        Some(("outcome", &["Approved", "Rejected", "NoQuorum"])),
    ),
    family(
        "icn_gateway_governance_votes_total",
        Kind::Counter,
        "Votes cast, by choice.",
        Some(("choice", &["For", "Against", "Abstain"])),
    ),
    family("icn_compute_tasks_timeout_total", Kind::Counter, "Compute claims that ran out of time.", None),
    family(
        "icn_compute_signatures_invalid_total",
        Kind::Counter,
        "Compute results refused for an invalid executor signature.",
        None,
    ),
    // The event stream (gateway-ws describes these itself).
    family(gateway_ws::metrics::WS_CONNECTIONS_ACTIVE, Kind::Gauge, "", None),
    family(gateway_ws::metrics::CONNECTIONS_TOTAL, Kind::Counter, "", None),
    family(gateway_ws::metrics::EVENTS_DELIVERED, Kind::Counter, "", None),
    family(gateway_ws::metrics::LAGGED_DISCONNECTS, Kind::Counter, "", None),
    family(gateway_ws::metrics::EVENTS_PRUNED, Kind::Counter, "", None),
];

/// Every family the gateway exports under its own prefix, for tests and documentation.
pub fn family_names() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().map(|f| f.name)
}

/// The families exported from the first scrape (the others appear with their first series:
/// the HTTP families with the first request, the balance sums with the first currency).
pub fn families_at_start() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().filter(|f| f.register).map(|f| f.name)
}

/// The process's one Prometheus recorder, installed on first use: the `metrics` facade has a
/// single global recorder, so every gateway served in this process (tests serve several)
/// reports through it.
pub(crate) fn handle() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: std::sync::Mutex<Option<PrometheusHandle>> = std::sync::Mutex::new(None);
    let mut installed = HANDLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(gateway_http::edge::REQUEST_DURATION.to_owned()),
            gateway_http::edge::DURATION_BUCKETS,
        )
        .context("the request-duration buckets")?
        .build_recorder();
    let handle = recorder.handle();
    // Remembered only once installed: a failed install (another recorder is already global)
    // fails every `serve`, rather than handing later ones a handle nothing records into.
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    gateway_ws::metrics::describe_metrics();
    register();
    process_collector().describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// Describes every family and registers the known label values at zero.
fn register() {
    for family in FAMILIES {
        if !family.help.is_empty() {
            match family.kind {
                Kind::Counter => describe_counter!(family.name, family.help),
                Kind::Gauge => describe_gauge!(family.name, family.help),
                Kind::Histogram => describe_histogram!(family.name, metrics::Unit::Seconds, family.help),
            }
        }
        if !family.register {
            continue;
        }
        match family.labels {
            None => zero(family.name, family.kind, None),
            Some((label, values)) => {
                for value in values {
                    zero(family.name, family.kind, Some((label, value)));
                }
            }
        }
    }
}

fn zero(name: &'static str, kind: Kind, label: Option<(&'static str, &'static str)>) {
    let labels: Vec<metrics::Label> = label.map(|(k, v)| metrics::Label::new(k, v)).into_iter().collect();
    match kind {
        Kind::Counter => metrics::counter!(name, labels).increment(0),
        Kind::Gauge => metrics::gauge!(name, labels).increment(0.0),
        Kind::Histogram => {}
    }
}

fn process_collector() -> metrics_process::Collector {
    metrics_process::Collector::default()
}

/// Serves `/metrics` on `listener`: the process figures are read and `before_scrape` runs (the
/// gauges computed from the gateway's state) at each scrape, the recorder's upkeep runs every
/// 5 s. With `handle` `None` (metrics off) it answers with a comment only.
pub(crate) async fn serve(
    listener: TcpListener,
    handle: Option<PrometheusHandle>,
    before_scrape: impl Fn() + Clone + Send + Sync + 'static,
) {
    let Some(handle) = handle else {
        let app = Router::new().route("/metrics", get(|| std::future::ready("# metrics are off (--metrics false)\n")));
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!("metrics listener failed: {err}");
        }
        return;
    };
    let upkeep = handle.clone();
    let upkeep = async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    };
    let collector = process_collector();
    let app = Router::new().route(
        "/metrics",
        get(move || {
            collector.collect();
            before_scrape();
            std::future::ready(handle.render())
        }),
    );
    tokio::select! {
        served = axum::serve(listener, app) => {
            if let Err(err) = served {
                tracing::error!("metrics listener failed: {err}");
            }
        }
        () = upkeep => {}
    }
}

#[cfg(test)]
mod tests {
    use super::AUTH_FAILURE_REASONS;

    #[test]
    fn every_request_signature_failure_reason_is_registered_up_front() {
        for failure in gateway_httpsig::Failure::ALL {
            assert!(AUTH_FAILURE_REASONS.contains(&failure.reason()), "{} is not pre-registered", failure.reason());
        }
    }
}
