//! The tlog-witness server (`gatewayd::witness`) over HTTP/1.1 on 127.0.0.1:0: every answer of
//! c2sp.org/tlog-witness, the state surviving a restart, concurrent requests serialised, and
//! the key file.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser as _;
use gateway_tlog::{
    Checkpoint, CosignatureVerifier, Cosigner, Hash, KnownLogs, LogState, MemoryTree, Note, Signer, WitnessState,
    add_checkpoint_request, consistency_proof, parse_add_checkpoint_response, parse_conflict_size,
};
use gatewayd::witness::{self, Witness, WitnessArgs, WitnessVkeyArgs};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;

const ORIGIN: &str = "log.coop-a.example";
const WITNESS: &str = "witness.coop-b.example/w1";

/// A log of 20 entries, its key, and the witness's key.
struct Fixture {
    tree: MemoryTree,
    log: Signer,
    cosigner: Cosigner,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let mut tree = MemoryTree::new();
        for i in 0..20u32 {
            tree.append_entry(format!("entry {i}").as_bytes());
        }
        Self {
            tree,
            log: Signer::from_seed(ORIGIN, &[1; 32]).unwrap(),
            cosigner: Cosigner::from_seed(WITNESS, &[9; 32]).unwrap(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn state_path(&self) -> std::path::PathBuf {
        self.dir.path().join("witness.state")
    }

    fn witness(&self) -> Witness {
        let mut logs = KnownLogs::new();
        logs.add_vkey(ORIGIN, &self.log.vkey()).unwrap();
        Witness::open(self.cosigner.clone(), logs, self.state_path()).unwrap()
    }

    fn checkpoint(&self, size: u64) -> Checkpoint {
        Checkpoint::new(ORIGIN, size, self.tree.root_at(size).unwrap()).unwrap()
    }

    fn signed_by(&self, checkpoint: &Checkpoint, signer: &Signer) -> String {
        let mut note = Note::new(checkpoint.to_text()).unwrap();
        note.sign(signer).unwrap();
        note.to_string()
    }

    fn proof(&self, old: u64, new: u64) -> Vec<Hash> {
        if old == 0 { Vec::new() } else { consistency_proof(old, new, &self.tree).unwrap() }
    }

    /// A correct request from `old` to `new`, signed by the log.
    fn body(&self, old: u64, new: u64) -> String {
        add_checkpoint_request(old, &self.proof(old, new), &self.signed_by(&self.checkpoint(new), &self.log))
    }
}

/// The witness's router on 127.0.0.1:0, stopped when dropped.
struct Server {
    addr: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(witness: Witness) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = witness::router(Arc::new(witness));
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Server { addr, task }
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

async fn send(addr: &str, method: &str, body: impl Into<Bytes>) -> Answer {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let request = Request::builder()
        .method(method)
        .uri("/add-checkpoint")
        .header("host", addr)
        .header("content-type", "text/plain")
        .body(Full::new(body.into()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer { status, content_type, body: String::from_utf8(bytes.to_vec()).unwrap() }
}

async fn post(addr: &str, body: &str) -> Answer {
    send(addr, "POST", body.to_owned()).await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Checks a 200 answer: one cosignature line by the witness that verifies on the checkpoint.
fn assert_cosigned(f: &Fixture, answer: &Answer, checkpoint: &Checkpoint) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.content_type.starts_with("text/plain"), "{}", answer.content_type);
    let signatures = parse_add_checkpoint_response(answer.body.as_bytes()).unwrap();
    assert_eq!(signatures.len(), 1);
    let verifier = CosignatureVerifier::from_vkey(&f.cosigner.vkey()).unwrap();
    assert_eq!((signatures[0].name(), signatures[0].key_id()), (WITNESS, verifier.key_id()));
    let timestamp = verifier.verify_cosignature(checkpoint.to_text().as_bytes(), signatures[0].signature()).unwrap();
    assert!(timestamp.abs_diff(now()) < 60, "timestamp {timestamp}");
    // Another checkpoint does not verify with it.
    let other = f.checkpoint(checkpoint.size() - 1).to_text();
    assert!(verifier.verify_cosignature(other.as_bytes(), signatures[0].signature()).is_err());
}

fn assert_conflict(answer: &Answer, size: u64) {
    assert_eq!(answer.status, 409, "{}", answer.body);
    assert_eq!(answer.content_type, "text/x.tlog.size");
    assert_eq!(answer.body, format!("{size}\n"));
    assert_eq!(parse_conflict_size(answer.body.as_bytes()), Some(size));
}

#[tokio::test]
async fn a_good_checkpoint_is_cosigned_and_recorded() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    assert_cosigned(&f, &post(&server.addr, &f.body(0, 5)).await, &f.checkpoint(5));
    assert_cosigned(&f, &post(&server.addr, &f.body(5, 12)).await, &f.checkpoint(12));
    // The cosignature joins the log's signature on the note, which then verifies with both keys.
    let answer = post(&server.addr, &f.body(12, 12)).await;
    assert_cosigned(&f, &answer, &f.checkpoint(12));
    let mut note = Note::parse(f.signed_by(&f.checkpoint(12), &f.log).as_bytes()).unwrap();
    for signature in parse_add_checkpoint_response(answer.body.as_bytes()).unwrap() {
        note.add_signature(signature).unwrap();
    }
    let verifier = f.cosigner.verifier();
    assert_eq!(note.verify(&[&f.log.verifier(), &verifier]).unwrap(), vec![0, 1]);

    let on_disk = WitnessState::parse(&std::fs::read_to_string(f.state_path()).unwrap()).unwrap();
    assert_eq!(on_disk.get(ORIGIN), Some(&LogState { size: 12, root: f.tree.root_at(12).unwrap() }));
    let leftovers: Vec<_> = std::fs::read_dir(f.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn a_forged_checkpoint_is_403() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    let forger = Signer::from_seed(ORIGIN, &[2; 32]).unwrap();
    let forged = add_checkpoint_request(0, &[], &f.signed_by(&f.checkpoint(5), &forger));
    let answer = post(&server.addr, &forged).await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    // Nothing was recorded: the log's real checkpoint still starts from 0.
    assert_cosigned(&f, &post(&server.addr, &f.body(0, 5)).await, &f.checkpoint(5));
}

#[tokio::test]
async fn a_stale_old_size_is_409_with_the_latest_size() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    assert_eq!(post(&server.addr, &f.body(0, 5)).await.status, 200);
    // A client that does not know what the witness saw asks with 0, and learns 5.
    assert_conflict(&post(&server.addr, &f.body(0, 12)).await, 5);
    assert_conflict(&post(&server.addr, &f.body(3, 12)).await, 5);
    // A rollback: a smaller checkpoint from an old size the client still believes in.
    assert_eq!(post(&server.addr, &f.body(5, 12)).await.status, 200);
    assert_conflict(&post(&server.addr, &f.body(5, 8)).await, 12);
    // The recorded size with another root: a fork, 409 too.
    let fork = Checkpoint::new(ORIGIN, 12, f.tree.root_at(11).unwrap()).unwrap();
    assert_conflict(&post(&server.addr, &add_checkpoint_request(12, &[], &f.signed_by(&fork, &f.log))).await, 12);
    // Old size above the checkpoint's: 400.
    let rollback = add_checkpoint_request(12, &[], &f.signed_by(&f.checkpoint(8), &f.log));
    assert_eq!(post(&server.addr, &rollback).await.status, 400);
}

#[tokio::test]
async fn a_bad_consistency_proof_is_422() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    assert_eq!(post(&server.addr, &f.body(0, 5)).await.status, 200);
    let mut proof = f.proof(5, 12);
    proof[0][0] ^= 0x80;
    let body = add_checkpoint_request(5, &proof, &f.signed_by(&f.checkpoint(12), &f.log));
    let answer = post(&server.addr, &body).await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    // A proof for other sizes, and none at all.
    let body = add_checkpoint_request(5, &f.proof(4, 12), &f.signed_by(&f.checkpoint(12), &f.log));
    assert_eq!(post(&server.addr, &body).await.status, 422);
    let body = add_checkpoint_request(5, &[], &f.signed_by(&f.checkpoint(12), &f.log));
    assert_eq!(post(&server.addr, &body).await.status, 422);
    // The state did not move.
    assert_conflict(&post(&server.addr, &f.body(0, 12)).await, 5);
}

#[tokio::test]
async fn an_unknown_origin_is_404() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    let other = Signer::from_seed("log.coop-z.example", &[3; 32]).unwrap();
    let checkpoint = Checkpoint::new("log.coop-z.example", 5, f.tree.root_at(5).unwrap()).unwrap();
    let answer = post(&server.addr, &add_checkpoint_request(0, &[], &f.signed_by(&checkpoint, &other))).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
}

#[tokio::test]
async fn malformed_oversized_and_wrong_method_requests_are_refused() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    let note = f.signed_by(&f.checkpoint(5), &f.log);
    for bad in [String::new(), format!("old 0\n{note}"), format!("old 00\n\n{note}"), "old 0\n\nhello\n".into()] {
        let answer = post(&server.addr, &bad).await;
        assert_eq!(answer.status, 400, "{bad:?}: {}", answer.body);
    }
    let huge = format!("old 0\n\n{}", "x".repeat(witness::MAX_BODY_BYTES + 1));
    assert_eq!(post(&server.addr, &huge).await.status, 413);
    assert_eq!(send(&server.addr, "GET", Bytes::new()).await.status, 405);
    // Still serving, from 0.
    assert_eq!(post(&server.addr, &f.body(0, 5)).await.status, 200);
}

#[tokio::test]
async fn the_state_survives_a_restart() {
    let f = Fixture::new();
    let server = start(f.witness()).await;
    assert_eq!(post(&server.addr, &f.body(0, 5)).await.status, 200);
    assert_eq!(post(&server.addr, &f.body(5, 12)).await.status, 200);
    drop(server);

    let server = start(f.witness()).await;
    assert_conflict(&post(&server.addr, &f.body(0, 15)).await, 12);
    assert_conflict(&post(&server.addr, &f.body(5, 15)).await, 12);
    assert_cosigned(&f, &post(&server.addr, &f.body(12, 15)).await, &f.checkpoint(15));
    drop(server);

    let server = start(f.witness()).await;
    assert_conflict(&post(&server.addr, &f.body(12, 20)).await, 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_from_one_size_cosign_once() {
    let f = Arc::new(Fixture::new());
    let server = start(f.witness()).await;
    assert_eq!(post(&server.addr, &f.body(0, 5)).await.status, 200);
    let requests: Vec<_> = (6..=20)
        .map(|size| {
            let (f, addr) = (f.clone(), server.addr.clone());
            tokio::spawn(async move { (size, post(&addr, &f.body(5, size)).await) })
        })
        .collect();
    let mut cosigned = Vec::new();
    for request in requests {
        let (size, answer) = request.await.unwrap();
        match answer.status {
            200 => cosigned.push(size),
            409 => assert_ne!(parse_conflict_size(answer.body.as_bytes()), Some(5)),
            other => panic!("{size}: {other} {}", answer.body),
        }
    }
    assert_eq!(cosigned.len(), 1, "exactly one request from size 5 wins: {cosigned:?}");
    let on_disk = WitnessState::parse(&std::fs::read_to_string(f.state_path()).unwrap()).unwrap();
    assert_eq!(on_disk.latest(ORIGIN).size, cosigned[0]);
}

#[test]
fn the_key_file_is_created_private_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("witness.key");
    let args = WitnessVkeyArgs { key: key.clone(), name: WITNESS.into() };
    let vkey = witness::vkey(&args).unwrap();
    assert!(vkey.starts_with(&format!("{WITNESS}+")), "{vkey}");
    assert!(CosignatureVerifier::from_vkey(&vkey).is_ok());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let text = std::fs::read_to_string(&key).unwrap();
    assert_eq!(text.len(), 45, "{text:?}");
    assert!(text.ends_with('\n'));
    assert_eq!(witness::vkey(&args).unwrap(), vkey, "the same key the second time");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["witness.key"], "no temporary file left");
    let other = tempfile::tempdir().unwrap();
    let fresh = witness::vkey(&WitnessVkeyArgs { key: other.path().join("k"), name: WITNESS.into() }).unwrap();
    assert_ne!(fresh, vkey, "a fresh random seed");

    // Hex seeds are read too; the seed of Cosigner::from_seed(.., &[9; 32]) gives its vkey.
    std::fs::write(&key, format!("{}\n", "09".repeat(32))).unwrap();
    assert_eq!(witness::vkey(&args).unwrap(), Cosigner::from_seed(WITNESS, &[9; 32]).unwrap().vkey());
    std::fs::write(&key, "not a seed\n").unwrap();
    assert!(witness::vkey(&args).is_err());
    assert!(witness::vkey(&WitnessVkeyArgs { key: other.path().join("k"), name: "bad name".into() }).is_err());
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    witness: WitnessArgs,
}

#[test]
fn the_command_line_parses_logs_as_origin_and_vkey() {
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let rotated = Signer::from_seed(ORIGIN, &[4; 32]).unwrap();
    let cli = Cli::try_parse_from([
        "witness",
        "--key",
        "w.key",
        "--state",
        "w.state",
        "--name",
        WITNESS,
        "--log",
        &format!("{ORIGIN}={}", log.vkey()),
        "--log",
        &format!("{ORIGIN}={}", rotated.vkey()),
    ])
    .unwrap();
    assert_eq!(cli.witness.listen.to_string(), witness::DEFAULT_LISTEN);
    assert_eq!(cli.witness.logs.len(), 2);
    assert_eq!(cli.witness.logs[0].origin, ORIGIN);
    assert_eq!(cli.witness.logs[0].verifier, log.verifier());
    for bad in [log.vkey(), format!("={}", log.vkey()), format!("{ORIGIN}=nonsense")] {
        let parsed = Cli::try_parse_from(["witness", "--key", "k", "--state", "s", "--name", "n", "--log", &bad]);
        assert!(parsed.is_err(), "{bad}");
    }
    // A cosigner key is not a log key.
    let cosigner = Cosigner::from_seed(WITNESS, &[9; 32]).unwrap().vkey();
    let parsed = Cli::try_parse_from([
        "witness",
        "--key",
        "k",
        "--state",
        "s",
        "--name",
        "n",
        "--log",
        &format!("{ORIGIN}={cosigner}"),
    ]);
    assert!(parsed.is_err());
    assert!(
        Cli::try_parse_from(["witness", "--key", "k", "--state", "s", "--name", "n"]).is_err(),
        "--log is required"
    );
}

#[tokio::test]
async fn serve_until_starts_from_the_arguments_and_stops() {
    let f = Fixture::new();
    let args = WitnessArgs {
        key: f.dir.path().join("witness.key"),
        listen: "127.0.0.1:0".parse().unwrap(),
        state: f.state_path(),
        logs: vec![format!("{ORIGIN}={}", f.log.vkey()).parse().unwrap()],
        name: WITNESS.into(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(witness::serve_until(args, async move {
        let _ = stopped.await;
    }));
    // It created the key and an empty state file before serving.
    for _ in 0..200 {
        if f.state_path().exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(f.dir.path().join("witness.key").exists());
    assert_eq!(std::fs::read_to_string(f.state_path()).unwrap(), "tlog-witness state v1\n");
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();

    // A corrupt state file is refused at start, not silently reset.
    std::fs::write(f.state_path(), "garbage\n").unwrap();
    let mut logs = KnownLogs::new();
    logs.add_vkey(ORIGIN, &f.log.vkey()).unwrap();
    assert!(Witness::open(f.cosigner.clone(), logs, f.state_path()).is_err());
}
