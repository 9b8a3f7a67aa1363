//! `percolator-ctl serve` as a process (on a memory store) against what a hostile web page or
//! a slow client can do: a `Host` that is not the dashboard's (DNS rebinding) and a `POST`
//! from another origin are refused, responses forbid framing, a connection that trickles its
//! headers is closed, and listening on a non-loopback address is warned about (issue 39,
//! item 9).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Hang guard for reads (not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(120);

struct Dashboard {
    child: Child,
    addr: String,
}

impl Dashboard {
    /// `percolator-ctl --store memory serve --listen LISTEN` with `more` arguments; waits for
    /// its "listening" line.
    fn start(listen: &str, more: &[&str]) -> Dashboard {
        let mut child = Command::new(env!("CARGO_BIN_EXE_percolator-ctl"))
            .args(["--store", "memory", "serve", "--listen", listen])
            .args(more)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting percolator-ctl serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("stdout");
        let addr = line
            .trim()
            .strip_prefix("dashboard listening on http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        Dashboard { child, addr }
    }

    fn port(&self) -> &str {
        self.addr.rsplit_once(':').map(|(_, p)| p).expect("port")
    }

    /// Stops it; returns its standard error.
    fn stop(mut self) -> String {
        percolator_cli::testkit::sigterm(self.child.id()).expect("SIGTERM");
        let mut stderr = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            err.read_to_string(&mut stderr).expect("stderr");
        }
        self.child.wait().expect("wait");
        stderr
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(addr: &str) -> TcpStream {
    let socket = TcpStream::connect(addr).expect("connect");
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    socket
}

/// One request with these extra header lines over a fresh connection to `addr`: the whole
/// response (head and body).
fn request(addr: &str, method: &str, path: &str, headers: &[String]) -> String {
    let mut socket = connect(addr);
    let body = if method == "POST" { "{}" } else { "" };
    let mut text = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ));
    socket.write_all(text.as_bytes()).expect("send");
    let mut response = String::new();
    socket.read_to_string(&mut response).expect("read");
    response
}

fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {response:?}"))
}

#[test]
fn the_dashboard_answers_only_its_own_host_and_origin_and_forbids_frames() {
    let dash = Dashboard::start("127.0.0.1:0", &["--allow-host", "dash.example"]);
    let addr = dash.addr.clone();
    let port = dash.port().to_string();
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        format!("dash.example:{port}"),
    ] {
        let r = request(&addr, "GET", "/api/status", &[format!("host: {host}")]);
        assert_eq!(status(&r), 200, "Host {host}: {r}");
        let lower = r.to_ascii_lowercase();
        assert!(lower.contains("x-frame-options: deny"), "{r}");
        assert!(
            lower.contains("content-security-policy: frame-ancestors 'none'"),
            "{r}"
        );
    }
    // DNS rebinding: the attacker's name, resolving to 127.0.0.1.
    for path in ["/", "/api/status", "/api/dead-letters", "/metrics"] {
        let r = request(
            &addr,
            "GET",
            path,
            &[format!("host: rebind.evil.example:{port}")],
        );
        assert_eq!(status(&r), 403, "GET {path}: {r}");
    }
    let prepare = "/api/dead-letters/prepare";
    let own = format!("host: {addr}");
    let r = request(
        &addr,
        "POST",
        prepare,
        &[own.clone(), "origin: http://evil.example".to_string()],
    );
    assert_eq!(status(&r), 403, "{r}");
    let r = request(&addr, "POST", prepare, std::slice::from_ref(&own));
    assert_eq!(status(&r), 403, "no Origin: {r}");
    // Its own page's POST passes the guard (and the body `{}` is refused as incomplete).
    let r = request(
        &addr,
        "POST",
        prepare,
        &[own, format!("origin: http://{addr}")],
    );
    assert_eq!(status(&r), 400, "{r}");
    dash.stop();
}

#[test]
fn a_client_trickling_its_headers_is_disconnected() {
    let dash = Dashboard::start("127.0.0.1:0", &["--header-timeout-ms", "300"]);
    let mut slow = connect(&dash.addr);
    slow.write_all(b"GET / HTTP/1.1\r\nhost: ").expect("send");
    // Never finishes its headers: the dashboard closes the connection (before the fix it
    // stayed open for good, and this read hit the hang guard).
    let mut rest = Vec::new();
    let read = slow.read_to_end(&mut rest);
    assert!(
        read.is_ok(),
        "closed by the dashboard, not timed out here: {read:?}"
    );
    // A connection that sends nothing at all is closed too.
    let mut idle = connect(&dash.addr);
    let mut nothing = Vec::new();
    assert!(idle.read_to_end(&mut nothing).is_ok());
    dash.stop();
}

#[test]
fn listening_beyond_loopback_is_warned_about() {
    let dash = Dashboard::start("0.0.0.0:0", &[]);
    let stderr = dash.stop();
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(stderr.contains("not loopback"), "{stderr}");
}
