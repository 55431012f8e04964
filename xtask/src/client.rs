//! What the harnesses share: a `gatewayd` child process, a keep-alive HTTP/1.1 connection, and a
//! login through challenge and verify with a real Ed25519 key.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use ed25519_dalek::{Signer, SigningKey};
use gateway_core::{Did, Ed25519PublicKey};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A running `gatewayd`, killed when dropped.
pub(crate) struct Server {
    child: Child,
    /// The API's `host:port`.
    pub(crate) addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The server's process id (to read its memory from `/proc`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `binary` on port 0 with `flags` and the JWT `secret`; waits for its address.
    pub(crate) fn start(binary: &Path, flags: &[&str], secret: &str) -> Result<Self, String> {
        let mut command = Command::new(binary);
        command
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(flags)
            .env("ICN_GATEWAY_JWT_SECRET", secret)
            .env("RUST_LOG", "warn,gatewayd=info");
        Self::spawn(command)
    }

    /// Starts `command`, which must print `listening on http://<host:port>` on its standard
    /// output (as `gatewayd` and `xtask baseline` do); waits for that line.
    pub(crate) fn spawn(mut command: Command) -> Result<Self, String> {
        use std::io::{BufRead, BufReader};
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))?;
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line =
                lines.next().ok_or_else(|| format!("{program} exited before listening"))?.map_err(|e| e.to_string())?;
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap_or_default().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, addr })
    }

    /// Builds the debug `gatewayd` (`cargo build -p gatewayd`) and starts it as [`Server::start`]
    /// does.
    pub(crate) fn start_debug(flags: &[&str], secret: &str) -> Result<Self, String> {
        Self::start(&build_debug_gatewayd()?, flags, secret)
    }
}

/// Builds the debug `gatewayd` (`cargo build --locked -p gatewayd`); its path.
pub(crate) fn build_debug_gatewayd() -> Result<PathBuf, String> {
    let status = crate::cargo()
        .args(["build", "--locked", "-p", "gatewayd"])
        .status()
        .map_err(|e| format!("building gatewayd: {e}"))?;
    if !status.success() {
        return Err("building gatewayd failed".into());
    }
    Ok(workspace().join("target/debug/gatewayd"))
}

/// One keep-alive HTTP/1.1 connection.
pub(crate) struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: String,
}

impl Connection {
    pub(crate) async fn open(addr: &str) -> Result<Self, String> {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        Ok(Self { sender, addr: addr.to_owned() })
    }

    /// Sends one request (JSON when `body` is given); returns the status and the body.
    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(u16, Bytes), String> {
        self.send_with(method, path, token, body, &[]).await
    }

    /// [`Connection::send`] with extra headers.
    pub(crate) async fn send_with(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Bytes), String> {
        let (status, _, body) = self.exchange(method, path, token, body, headers).await?;
        Ok((status, body))
    }

    /// [`Connection::send_with`] with the answer's headers.
    pub(crate) async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
        let mut builder = Request::builder().method(method).uri(path).header("host", &self.addr);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let body = match body {
            Some(b) => {
                builder = builder.header("content-type", "application/json");
                Full::new(Bytes::from(b.to_string()))
            }
            None => Full::new(Bytes::new()),
        };
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let response = self
            .sender
            .send_request(builder.body(body).map_err(|e| e.to_string())?)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let answer_headers = response.headers().clone();
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, answer_headers, bytes))
    }
}

/// The signing key of seed `n` and its `did:key`.
pub(crate) fn identity(n: u8) -> (SigningKey, String) {
    let key = SigningKey::from_bytes(&[n; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes())).to_string();
    (key, did)
}

/// Logs in as `did` through challenge and verify: signs the nonce's UTF-8 bytes with `key` and
/// sends the hex signature with the challenge id. `context` is the `coop_id` and `scopes` of the
/// token; without it the token is identity-only. Returns the token.
pub(crate) async fn login(
    conn: &mut Connection,
    key: &SigningKey,
    did: &str,
    context: Option<(&str, &[&str])>,
) -> Result<String, String> {
    let challenge = expect(conn.send("POST", "/v1/auth/challenge", None, Some(&json!({ "did": did }))).await?, 200)?;
    let nonce = challenge["nonce"].as_str().ok_or("the challenge has no nonce")?;
    let signature = hex::encode(key.sign(nonce.as_bytes()).to_bytes());
    let mut verify = json!({ "did": did, "signature": signature, "challenge_id": challenge["challenge_id"] });
    if let Some((coop_id, scopes)) = context {
        verify["coop_id"] = json!(coop_id);
        verify["scopes"] = json!(scopes);
    }
    let answer = expect(conn.send("POST", "/v1/auth/verify", None, Some(&verify)).await?, 200)?;
    Ok(answer["token"].as_str().ok_or("the login answer has no token")?.to_owned())
}

/// The JSON body of an answer of status `want`; any other status is an error with the body.
pub(crate) fn expect((status, body): (u16, Bytes), want: u16) -> Result<Value, String> {
    if status != want {
        return Err(format!("expected {want}, got {status}: {}", String::from_utf8_lossy(&body)));
    }
    serde_json::from_slice(&body).map_err(|e| format!("answer is not JSON: {e}"))
}

/// The resident set of process `pid`, bytes (0 when it cannot be read).
pub(crate) fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}
