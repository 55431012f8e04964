//! What the harnesses share: a `gatewayd` child process and a keep-alive HTTP/1.1 connection.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;

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
    /// Starts `binary` on port 0 with `flags` and the JWT `secret`; waits for its address.
    pub(crate) fn start(binary: &Path, flags: &[&str], secret: &str) -> Result<Self, String> {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(binary)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(flags)
            .env("ICN_GATEWAY_JWT_SECRET", secret)
            .env("RUST_LOG", "warn,gatewayd=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines.next().ok_or("gatewayd exited before listening")?.map_err(|e| e.to_string())?;
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap_or_default().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, addr })
    }
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
        let mut builder = Request::builder().method(method).uri(path).header("host", &self.addr);
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
        let bytes = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((status, bytes))
    }
}
