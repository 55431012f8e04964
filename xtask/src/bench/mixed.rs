//! The `mixed` scenario: every kind of load at once on one gateway for `--seconds`: balance reads
//! (half the connections), durable payments (a quarter), logins (a quarter, each from its own
//! client address as in the `login` scenario) and WebSocket subscribers following the coop's
//! events (a quarter of the connection count again, authenticated before the load starts).
//!
//! The payments connections are a quarter of the connections so that a run stays well inside the
//! payers' velocity limit (see `PAYERS`). Every acknowledged payment is one event of the coop, so
//! each subscriber must receive exactly as many: after the load stops they are given up to 5 s to
//! catch up, and the events missing then count as errors.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::login::{login_loop, members, next_address};
use super::{
    COOP, Figures, Kind, Options, Table, did, on_two_workers, request_loop, setup, start_gateway, token,
    until_finished, work,
};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A subscriber connected and authenticated: its socket and the sequence number it starts after.
async fn subscribe(addr: &str, n: usize) -> Result<(Socket, u64), String> {
    let mut request = format!("ws://{addr}/v1/ws/{COOP}").into_client_request().map_err(|e| e.to_string())?;
    let address = next_address().parse().map_err(|e| format!("client address: {e}"))?;
    request.headers_mut().insert("x-forwarded-for", address);
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| format!("WebSocket: {e}"))?;
    let auth = json!({ "type": "Auth", "token": token(&did(n), &["ledger:read"]) });
    ws.send(Message::text(auth.to_string())).await.map_err(|e| format!("WebSocket: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let frame = tokio::time::timeout_at(deadline.into(), ws.next())
            .await
            .map_err(|_| "no AuthOk within 10 s".to_owned())?
            .ok_or("the WebSocket closed before AuthOk")?
            .map_err(|e| format!("WebSocket: {e}"))?;
        if let Message::Text(text) = frame {
            let frame: Value = serde_json::from_str(text.as_str()).map_err(|e| format!("WebSocket frame: {e}"))?;
            match frame["type"].as_str() {
                Some("AuthOk") => return Ok((ws, frame["current_seq"].as_u64().unwrap_or(0))),
                Some("AuthError") => return Err(format!("WebSocket authentication: {frame}")),
                _ => {}
            }
        }
    }
}

/// Counts the `Event` frames a subscriber receives, until it has every event up to `start` plus
/// `target` (set once the load has stopped; `u64::MAX` until then) or `give_up`.
async fn follow(mut ws: Socket, start: u64, target: Arc<AtomicU64>, give_up: Arc<AtomicBool>) -> Result<u64, String> {
    let (mut events, mut last) = (0u64, start);
    loop {
        let target = target.load(Ordering::Relaxed);
        if (target != u64::MAX && last >= start + target) || give_up.load(Ordering::Relaxed) {
            return Ok(events);
        }
        match tokio::time::timeout(Duration::from_millis(100), ws.next()).await {
            Err(_) => {}
            Ok(Some(Ok(Message::Text(text)))) => {
                let frame: Value = serde_json::from_str(text.as_str()).map_err(|e| format!("WebSocket frame: {e}"))?;
                if frame["type"] == "Event" {
                    events += 1;
                    last = last.max(frame["seq"].as_u64().unwrap_or(0));
                }
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(format!("WebSocket: {e}")),
            Ok(None) => return Err("the WebSocket closed during the run".into()),
        }
    }
}

pub(super) fn scenario(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    let c = options.connections;
    let (reads, payments, logins, subscribers) = ((c / 2).max(1), (c / 4).max(1), (c / 4).max(1), (c / 4).max(1));
    let (figures, events) = on_two_workers(async {
        let server = start_gateway(options, dir, &["--trusted-proxy", "127.0.0.1"])?;
        setup(&server.addr).await?;
        let addr = server.addr.clone();
        let (target, give_up) = (Arc::new(AtomicU64::new(u64::MAX)), Arc::new(AtomicBool::new(false)));
        let mut followers = Vec::new();
        for s in 0..subscribers {
            let (ws, start) = subscribe(&addr, s + 1).await?;
            followers.push(tokio::spawn(follow(ws, start, target.clone(), give_up.clone())));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut read_tasks = Vec::new();
        for r in 0..reads {
            let work = work(Kind::Balance, r, reads);
            let run = request_loop(addr.clone(), Kind::Balance, work, None, stop.clone());
            read_tasks.push(tokio::spawn(async move { run.await.map(|(tally, _)| tally) }));
        }
        let mut payment_tasks = Vec::new();
        for p in 0..payments {
            let work = work(Kind::Payments, p, payments);
            // No budget: the quarter of the connections that pay stays well inside it.
            let run = request_loop(addr.clone(), Kind::Payments, work, None, stop.clone());
            payment_tasks.push(tokio::spawn(async move { run.await.map(|(tally, _)| tally) }));
        }
        let members = members();
        let login_tasks: Vec<_> = (0..logins)
            .map(|l| tokio::spawn(login_loop(addr.clone(), members.clone(), l, logins, stop.clone())))
            .collect();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(options.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut figures = Vec::new();
        for tasks in [read_tasks, payment_tasks, login_tasks] {
            let mut tallies = Vec::new();
            for task in tasks {
                tallies.push(task.await.map_err(|e| e.to_string())??);
            }
            figures.push(Figures::of(tallies, started.elapsed().as_secs_f64()));
        }
        target.store(figures[1].requests, Ordering::Relaxed);
        until_finished(&followers, Instant::now() + Duration::from_secs(5)).await;
        give_up.store(true, Ordering::Relaxed);
        let mut events = 0;
        for follower in followers {
            events += follower.await.map_err(|e| e.to_string())??;
        }
        Ok::<_, String>((figures, events))
    })?;
    let labels = [
        format!("mixed: balance reads ({reads} connections)"),
        format!("mixed: durable payments ({payments} connections)"),
        format!("mixed: logins ({logins} connections; per login)"),
    ];
    for (figures, label) in figures.iter().zip(&labels) {
        table.figures(figures, label);
    }
    let expected = figures[1].requests * subscribers as u64;
    let missing = expected.saturating_sub(events);
    table.unexpected += missing;
    println!(
        "\nmixed: {subscribers} WebSocket subscribers, events delivered {events} of {expected} \
         (payments acknowledged × subscribers), {missing} missing, {:.0} events/s\n",
        events as f64 / figures[1].seconds
    );
    Ok(())
}
