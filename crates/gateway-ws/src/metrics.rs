//! The stream's metric names, and the handles a connection updates.
//!
//! Metrics go through the `metrics` facade; installing a recorder (Prometheus) is the binary's
//! business. Nothing here is labelled by coop or DID, so cardinality stays constant.

use metrics::{Counter, Gauge};

/// Open event-stream sockets. (`icn_network_connections_active` is the gateway's backend
/// connections, INTERFACE.md §10, not these.)
pub const WS_CONNECTIONS_ACTIVE: &str = "icn_gateway_ws_connections_active";
/// Sockets accepted since start.
pub const CONNECTIONS_TOTAL: &str = "icn_gateway_ws_connections_total";
/// `Event` frames written to sockets (live and backfilled).
pub const EVENTS_DELIVERED: &str = "icn_gateway_ws_events_delivered_total";
/// Connections closed with 1013 `lagged` because they fell too far behind.
pub const LAGGED_DISCONNECTS: &str = "icn_gateway_ws_lagged_disconnects_total";
/// Events deleted by the retention task.
pub const EVENTS_PRUNED: &str = "icn_gateway_ws_events_pruned_total";

/// Registers the descriptions of this crate's metrics with the installed recorder; call it once
/// after installing the recorder, so that `/metrics` explains them.
pub fn describe_metrics() {
    metrics::describe_gauge!(WS_CONNECTIONS_ACTIVE, "Open event-stream WebSocket connections.");
    metrics::describe_counter!(CONNECTIONS_TOTAL, "Event-stream WebSocket connections accepted.");
    metrics::describe_counter!(EVENTS_DELIVERED, "Event frames written to event-stream sockets.");
    metrics::describe_counter!(LAGGED_DISCONNECTS, "Event-stream connections closed as lagged (1013).");
    metrics::describe_counter!(EVENTS_PRUNED, "Outbox events deleted by the retention task.");
}

/// Counts a socket accepted and open.
pub(crate) fn connection_opened() {
    metrics::counter!(CONNECTIONS_TOTAL).increment(1);
    active_gauge().increment(1.0);
}

/// Undoes [`connection_opened`]'s gauge.
pub(crate) fn connection_closed() {
    active_gauge().decrement(1.0);
}

fn active_gauge() -> Gauge {
    metrics::gauge!(WS_CONNECTIONS_ACTIVE)
}

/// Counter handles a connection updates on its hot path, looked up once per connection (the
/// macros hash the name on every call).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionMetrics {
    pub(crate) delivered: Counter,
    pub(crate) lagged: Counter,
}

impl ConnectionMetrics {
    pub(crate) fn new() -> Self {
        Self { delivered: metrics::counter!(EVENTS_DELIVERED), lagged: metrics::counter!(LAGGED_DISCONNECTS) }
    }
}
