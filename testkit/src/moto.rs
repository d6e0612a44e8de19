//! moto's S3 server for the remote tests and benches: made into a venv by `tests/s3/venv.sh`
//! (safe to run from parallel tests: it takes a lock), started on a free port of 127.0.0.1
//! and killed by its PID when dropped.
//!
//! Where moto cannot be installed (no Python, no PyPI), [`Moto::start`] prints the reason and
//! returns `None`, so a test can skip; under CI (`CI` set to anything but `false` or `0`) it
//! panics instead, so a CI run can never pass with the S3 tests skipped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::series::repo_root;

/// How long a server may take to listen.
const START: Duration = Duration::from_secs(30);

/// The bucket every server is started with.
pub const BUCKET: &str = "bkt";

/// A moto S3 server on a port of 127.0.0.1 holding the bucket [`BUCKET`], killed when dropped
/// (also when a panic unwinds).
#[derive(Debug)]
pub struct Moto {
    child: Child,
    server: PathBuf,
    /// The port it listens on.
    pub port: u16,
}

/// Whether this run is a CI run, where a missing S3 server is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The path of `moto_server`, making its venv if needed (`tests/s3/venv.sh`).
///
/// # Errors
/// Why the venv could not be made.
pub fn server_path() -> Result<PathBuf, String> {
    let script = repo_root().join("tests/s3/venv.sh");
    let made = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !made.status.success() {
        return Err(format!(
            "{} failed ({}): moto's S3 server could not be installed",
            script.display(),
            made.status
        ));
    }
    let text = String::from_utf8(made.stdout).map_err(|e| e.to_string())?;
    Ok(PathBuf::from(text.trim()))
}

impl Moto {
    /// Starts a server on a free port; `None`, with the reason printed, where moto cannot be
    /// installed.
    ///
    /// # Panics
    /// Under CI when moto cannot be installed, and when a server that was installed does not
    /// start.
    pub fn start() -> Option<Moto> {
        match Moto::try_start() {
            Ok(m) => Some(m),
            Err(reason) if in_ci() => panic!("CI is set and moto's S3 server is missing: {reason}"),
            Err(reason) => {
                eprintln!("SKIPPED: {reason}");
                None
            }
        }
    }

    /// Starts a server on a free port.
    ///
    /// # Errors
    /// Why it could not be installed or started.
    pub fn try_start() -> Result<Moto, String> {
        let server = server_path()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        Moto::on_port(&server, port)
    }

    /// Starts `server` on `port` and creates the bucket.
    ///
    /// # Errors
    /// Why it did not start.
    pub fn on_port(server: &Path, port: u16) -> Result<Moto, String> {
        let child = Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
        // From here on, Drop stops it.
        let mut moto = Moto {
            child,
            server: server.to_path_buf(),
            port,
        };
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                return Err(format!("moto_server exited ({status}) before listening"));
            }
            if t.elapsed() > START {
                return Err(format!("moto_server did not listen on port {port} in 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (status, body) = moto.http("PUT", &format!("/{BUCKET}"), b"")?;
        if status != 200 {
            return Err(format!(
                "creating the bucket answered {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(moto)
    }

    /// Kills the server (its objects are lost) and starts a new, empty one on the same port.
    ///
    /// # Errors
    /// Why the new one did not start.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        *self = Moto::on_port(&self.server.clone(), self.port)?;
        Ok(())
    }

    /// Kills the server now (a request in flight fails).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The endpoint URL (`AWS_ENDPOINT_URL`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment a client needs to reach the server (moto checks no signature).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
        ]
    }

    /// `cmd` with [`Moto::env`] set.
    pub fn with_env(&self, mut cmd: Command) -> Command {
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd
    }

    /// One plain HTTP request (moto does not check signatures): status and body.
    ///
    /// # Errors
    /// A connection or protocol failure.
    pub fn http(&self, method: &str, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        let fail = |e: std::io::Error| format!("{method} {path}: {e}");
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(fail)?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        )
        .map_err(fail)?;
        s.write_all(body).map_err(fail)?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).map_err(fail)?;
        let text = String::from_utf8_lossy(&resp);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("{method} {path}: no status in the answer"))?;
        let start = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(resp.len(), |p| p + 4);
        Ok((status, resp[start..].to_vec()))
    }

    /// Object keys under `prefix` in the bucket (up to 10,000).
    ///
    /// # Errors
    /// A failed request.
    pub fn keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        let (_, body) = self.http(
            "GET",
            &format!("/{BUCKET}?list-type=2&prefix={prefix}&max-keys=10000"),
            b"",
        )?;
        let text = String::from_utf8_lossy(&body).to_string();
        Ok(text
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split("</Key>").next())
            .map(str::to_string)
            .collect())
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
    }
}
