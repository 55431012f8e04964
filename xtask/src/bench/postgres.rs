//! `postgres`: the gateway's durable payments on PostgreSQL against PostgreSQL's own yardstick,
//! in one run, alternated round by round:
//!
//! - `pgbench -b tpcb-like` (16 clients, 2 threads) at scale 1, where every transaction updates the
//!   one branch row: the ceiling of commits that all change one hot row, as every payment of one
//!   coop changes the coop's event counter; and at scale 64, 64 branch rows;
//! - release gateways with Redis behind an HAProxy round-robin balancer (`haproxy` on `PATH`;
//!   without it the connections are spread over the replicas in turn, and the run says so):
//!   one replica and three, with the payers of one coop; then one replica with payers spread
//!   over 64 coops (10 each), each paying a member of its own coop.
//!
//! It prints each system's payments (or transactions) per second and the ratios the cluster's
//! goals name: one coop on one replica ÷ pgbench at scale 1, three replicas ÷ one (and their
//! p99), 64 coops ÷ pgbench at scale 64. Everything shares the machine's cores: PostgreSQL, Redis,
//! the balancer, the replicas and the generators (this one, or `pgbench`'s own clients).
//! `--quick` runs scale 1 and 4 coops for a second each, to prove the harness works.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{
    COOP, Figures, Killed, Kind, Options, SECRET, Table, Work, did, drive_all, fresh_schema, mean, replicas, start_on,
};
use crate::client::{Connection, Server};

/// Payers per coop in the many-coops configuration.
const PAYERS_PER_COOP: usize = 10;

/// One configuration of gateways: the replicas, the balancer in front of them when there is
/// one, and the addresses the generator's connections go to.
struct Gateways {
    _servers: Vec<Server>,
    _balancer: Option<Killed>,
    targets: Vec<String>,
}

/// Starts HAProxy round-robin over `backends` on a free port; `Ok(None)` when `haproxy` is not
/// installed.
fn start_balancer(dir: &std::path::Path, name: &str, backends: &[String]) -> Result<Option<(Killed, String)>, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("finding a free port: {e}"))?
        .port();
    let servers: String =
        backends.iter().enumerate().map(|(i, addr)| format!("    server replica{i} {addr}\n")).collect();
    let config = format!(
        "global\n    maxconn 4096\n\ndefaults\n    mode http\n    option http-keep-alive\n    \
         timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\n\
         frontend gateways\n    bind 127.0.0.1:{port}\n    default_backend replicas\n\n\
         backend replicas\n    balance roundrobin\n{servers}"
    );
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(format!("haproxy-{name}.cfg"));
    std::fs::write(&path, config).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let child = Command::new("haproxy").arg("-f").arg(&path).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let mut balancer = match child {
        Ok(child) => Killed(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("starting haproxy: {e}")),
    };
    let addr = format!("127.0.0.1:{port}");
    super::wait_listening(&mut balancer.0, &addr, &format!("haproxy -f {}", path.display()))?;
    Ok(Some((balancer, addr)))
}

/// Puts the balancer in front of `servers` (or, without one, spreads the connections over them).
fn fronted(dir: &std::path::Path, name: &str, servers: Vec<Server>) -> Result<Gateways, String> {
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    Ok(match start_balancer(dir, name, &addrs)? {
        Some((balancer, addr)) => Gateways { _servers: servers, _balancer: Some(balancer), targets: vec![addr] },
        None => Gateways { _servers: servers, _balancer: None, targets: addrs },
    })
}

/// A token of `did` in coop `coop`.
fn token_in(did: &str, coop: &str, scopes: &[&str]) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "sub": did, "coop_id": coop, "scopes": scopes, "iat": now, "exp": now + 3600,
        "iss": "icn-gateway", "aud": "icn-gateway", "jti": format!("bench-{coop}-{did}"),
    });
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes())).expect("token")
}

/// The coop of payer `p` among `coops`.
fn coop_of(p: usize, coops: usize) -> String {
    format!("{COOP}-{}", p % coops)
}

/// `coops` coops, each founded by its own DID with its [`PAYERS_PER_COOP`] payers: payer `p` is in
/// coop `p % coops`.
async fn setup_coops(addr: &str, coops: usize) -> Result<(), String> {
    let mut conn = Connection::open(addr).await?;
    for k in 0..coops {
        let coop = coop_of(k, coops);
        let founder = token_in(&did(100_000 + k), &coop, &["coop:read", "coop:write"]);
        let create = json!({ "name": coop, "coop_type": "worker" });
        let (status, body) = conn.send("POST", "/v1/coops", Some(&founder), Some(&create)).await?;
        if status != 201 {
            return Err(format!("creating coop {coop}: {status} {}", String::from_utf8_lossy(&body)));
        }
        for p in (k..coops * PAYERS_PER_COOP).step_by(coops) {
            let path = format!("/v1/coops/{coop}/members");
            let (status, body) = conn.send("POST", &path, Some(&founder), Some(&json!({ "did": did(p) }))).await?;
            if status != 201 {
                return Err(format!("adding payer {p} to {coop}: {status} {}", String::from_utf8_lossy(&body)));
            }
        }
    }
    Ok(())
}

/// Payer `p`'s payment to the next payer of its coop, as [`super::payment`] for one coop.
fn coop_payment(p: usize, coops: usize) -> (String, String, Value) {
    let payers = coops * PAYERS_PER_COOP;
    let coop = coop_of(p, coops);
    let body = json!({ "from": did(p), "to": did((p + coops) % payers), "amount": 0.01, "currency": "hours" });
    (token_in(&did(p), &coop, &["ledger:write"]), format!("/v1/ledger/{coop}/payment"), body)
}

/// The many-coops load: `connections` closed loops over the payers of `coops` coops.
async fn drive_coops(targets: &[String], coops: usize, connections: usize, seconds: u64) -> Result<Figures, String> {
    let payers = coops * PAYERS_PER_COOP;
    let work: Vec<Vec<Work>> = (0..connections)
        .map(|c| {
            (c % payers..payers)
                .step_by(connections)
                .map(|p| {
                    let (token, path, body) = coop_payment(p, coops);
                    (token, path, Some(body), None)
                })
                .collect()
        })
        .collect();
    super::drive_work(targets, Kind::Payments, work, seconds).await
}

/// `pgbench -b tpcb-like` on the schema of `url` (see [`pgbench_schema`]) for `seconds`: its
/// transactions per second and its mean latency in milliseconds (pgbench reports no p99
/// without a per-transaction log).
fn pgbench(url: &str, seconds: u64) -> Result<(f64, f64), String> {
    let output = Command::new("pgbench")
        .args(["-n", "-b", "tpcb-like", "-c", "16", "-j", "2", "-T", &seconds.to_string(), url])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("pgbench: {e} (install PostgreSQL's client programs)"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("pgbench failed: {text}"));
    }
    let field = |prefix: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
    };
    let tps = field("tps = ").ok_or_else(|| format!("no tps in pgbench's output: {text}"))?;
    let latency = field("latency average = ").unwrap_or(0.0);
    Ok((tps, latency))
}

/// A schema of the test database holding pgbench's tables at `scale`; its URL.
fn pgbench_schema(base: &str, scale: usize) -> Result<String, String> {
    let url = fresh_schema(base, &format!("pgbench{scale}"))?;
    let status = Command::new("pgbench")
        .args(["-i", "-q", "-I", "dtGvp", "-s", &scale.to_string(), &url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("pgbench -i: {e} (install PostgreSQL's client programs)"))?;
    if !status.success() {
        return Err(format!("pgbench -i -s {scale} failed"));
    }
    Ok(url)
}

pub(super) async fn scenario(options: &Options, dir: &std::path::Path, table: &mut Table) -> Result<(), String> {
    let postgres = std::env::var("GATEWAY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let redis = std::env::var("GATEWAY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let (seconds, connections) = (options.seconds, options.connections);
    let coops = if options.quick { 4 } else { 64 };
    let hot = pgbench_schema(&postgres, 1)?;
    let spread = pgbench_schema(&postgres, coops)?;

    let one = fronted(dir, "one", replicas(options, "pgone", 1, Some(&redis)).await?)?;
    let three = fronted(dir, "three", replicas(options, "pgthree", 3, Some(&redis)).await?)?;
    let many = {
        let store = fresh_schema(&postgres, "pgcoops")?;
        let prefix = format!("bench:pgcoops:{}:", std::process::id());
        let server = start_on(options, &store, &["--redis", &redis, "--redis-prefix", &prefix])?;
        setup_coops(&server.addr, coops).await?;
        fronted(dir, "coops", vec![server])?
    };
    if one._balancer.is_none() {
        println!("\n(haproxy is not installed: the generator's connections go to the replicas in turn)\n");
    }

    let mut figures: [Vec<(f64, f64)>; 5] = Default::default();
    for round in 1..=options.rounds {
        let (tps, latency) = pgbench(&hot, seconds)?;
        println!(
            "| round {round}: pgbench tpcb-like, scale 1, 16 clients | {tps:.0} | | (mean {latency:.2}) | – | 0 |"
        );
        figures[0].push((tps, latency));
        for (i, (gateways, name)) in [(&one, "1 replica"), (&three, "3 replicas")].into_iter().enumerate() {
            let run = drive_all(&gateways.targets, Kind::Payments, connections, seconds).await?;
            table.figures(&run, &format!("round {round}: payments, one coop, {name}, Redis"));
            figures[1 + i].push((run.rps(), run.percentile(0.99)));
        }
        let (tps, latency) = pgbench(&spread, seconds)?;
        println!(
            "| round {round}: pgbench tpcb-like, scale {coops}, 16 clients | {tps:.0} | | (mean {latency:.2}) | – | 0 |"
        );
        figures[3].push((tps, latency));
        let run = drive_coops(&many.targets, coops, connections, seconds).await?;
        table.figures(&run, &format!("round {round}: payments, {coops} coops, 1 replica, Redis"));
        figures[4].push((run.rps(), run.percentile(0.99)));
    }
    let rate = |i: usize| mean(figures[i].iter().map(|f| f.0));
    let p99 = |i: usize| mean(figures[i].iter().map(|f| f.1));
    println!(
        "\none coop, 1 replica / pgbench scale 1: {:.3}× (goal ≥ 1.0)\n\
         3 replicas / 1 replica: {:.3}×, p99 {:.1} ms (goals ≥ 1.0×, p99 ≤ 100 ms)\n\
         {coops} coops, 1 replica / pgbench scale {coops}: {:.3}× (goal ≥ 0.5)\n",
        rate(1) / rate(0),
        rate(2) / rate(1),
        p99(2),
        rate(4) / rate(3),
    );
    Ok(())
}
