//! A small Chrome DevTools Protocol driver for the dashboard's browser test: headless
//! Chromium with `--remote-debugging-pipe` (commands on fd 3, answers and events on fd 4,
//! each message a JSON document ending in a NUL byte), so no WebSocket client and no port is
//! needed. Synchronous: the test runs it on a blocking thread.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long one protocol call may take on a loaded machine (a hang guard, not a timing
/// assertion).
const CALL_PATIENCE: Duration = Duration::from_secs(120);

/// The Chromium binary: `$CHROMIUM`, else the first of the usual names on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// A headless Chromium with one page attached.
pub struct Browser {
    child: Child,
    commands: std::io::PipeWriter,
    messages: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `binary` headless with a fresh profile and a `width` x `height` window.
    pub fn launch(binary: &Path, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let (cmd_read, cmd_write) = std::io::pipe().expect("pipe");
        let (msg_read, msg_write) = std::io::pipe().expect("pipe");
        let mut command = Command::new(binary);
        command
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-extensions",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        {
            use std::os::fd::AsRawFd;
            let (r, w) = (cmd_read.as_raw_fd(), msg_write.as_raw_fd());
            // SAFETY: fcntl and dup2 are async-signal-safe; between fork and exec the child
            // only moves the two pipe ends to the descriptors the protocol uses. They are
            // copied above 10 first, since either may already be 3 or 4 (where a dup2 onto
            // itself would keep close-on-exec, or the first dup2 would close the other end);
            // dup2 clears close-on-exec on its target.
            unsafe {
                command.pre_exec(move || {
                    let high_r = libc::fcntl(r, libc::F_DUPFD, 10);
                    let high_w = libc::fcntl(w, libc::F_DUPFD, 10);
                    if high_r < 0
                        || high_w < 0
                        || libc::dup2(high_r, 3) < 0
                        || libc::dup2(high_w, 4) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        // The child's ends belong to the child now; closing ours lets EOF show when it exits.
        drop(cmd_read);
        drop(msg_write);
        let (tx, messages) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(msg_read);
            loop {
                let mut buf = Vec::new();
                match reader.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                buf.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        Browser {
            child,
            commands: cmd_write,
            messages,
            next_id: 0,
            session: None,
            _profile: profile,
        }
    }

    /// Sends one command (to the attached page, once there is one) and returns its result.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("json");
        bytes.push(0);
        self.commands
            .write_all(&bytes)
            .map_err(|e| format!("{method}: writing to the browser: {e}"))?;
        let deadline = Instant::now() + CALL_PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    if let Some(error) = v.get("error") {
                        return Err(format!("{method}: {error}"));
                    }
                    return Ok(v["result"].clone());
                }
                Ok(_) => continue, // an event, or another session's answer
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("{method}: no answer in {CALL_PATIENCE:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("{method}: the browser exited"))
                }
            }
        }
    }

    /// Opens `url` in a new page and attaches to it: later calls go to that page.
    pub fn open(&mut self, url: &str) -> Result<(), String> {
        let target = self.call("Target.createTarget", json!({"url": "about:blank"}))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or("no targetId")?
            .to_string();
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        )?;
        self.session = Some(
            attached["sessionId"]
                .as_str()
                .ok_or("no sessionId")?
                .to_string(),
        );
        self.call("Page.enable", json!({}))?;
        self.call("Page.navigate", json!({"url": url}))?;
        Ok(())
    }

    /// Evaluates a JavaScript expression in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, expression: &str) -> Result<Value, String> {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(exception) = result.get("exceptionDetails") {
            return Err(format!("{expression}: {exception}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Polls `expression` until it is `true`; panics with `what` and the page's text after
    /// `patience`.
    pub fn wait_for(&mut self, what: &str, expression: &str, patience: Duration) {
        let started = Instant::now();
        loop {
            match self.eval(expression) {
                Ok(Value::Bool(true)) => return,
                Ok(_) | Err(_) if started.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                other => {
                    let page = self.eval("document.body && document.body.innerText");
                    panic!(
                        "gave up waiting for {what} after {patience:?}: {other:?}\npage:\n{}",
                        page.ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default()
                    );
                }
            }
        }
    }

    /// A PNG of the page as it is shown.
    pub fn screenshot(&mut self) -> Result<Vec<u8>, String> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}))?;
        decode_base64(shot["data"].as_str().ok_or("no screenshot data")?)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.session = None;
        let _ = self.call("Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (with padding), as the protocol sends binary data.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let value = |c: u8| -> Result<u32, String> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        } as u32)
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&c| c != b'=').collect();
        let mut n = 0u32;
        for &c in &data {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * (4 - data.len() as u32);
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..data.len().saturating_sub(1)]);
    }
    Ok(out)
}
