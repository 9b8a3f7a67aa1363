//! Test helpers for the binaries (feature `testkit`): start one, wait for its readiness line
//! and send SIGTERM the instant it appears; send signals to child processes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Stdio};

/// The output stream that carries a binary's readiness line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What a binary did when terminated at its readiness line.
#[derive(Debug)]
pub struct Terminated {
    /// Its exit status.
    pub status: ExitStatus,
    /// The readiness line (without the line break).
    pub ready: String,
    /// Everything it wrote to stdout (readiness line included, if there).
    pub stdout: String,
    /// Everything it wrote to stderr (readiness line included, if there).
    pub stderr: String,
}

impl Terminated {
    /// Panics unless the process exited with status 0, i.e. shut down gracefully after the
    /// SIGTERM, naming the `round` of a repeated test and the process's stderr.
    pub fn assert_clean_exit(&self, round: usize) {
        assert!(
            self.status.success(),
            "round {round}: SIGTERM at readiness: {} (not a clean exit)\nstderr:\n{}",
            self.status,
            self.stderr
        );
    }

    /// Panics unless the process's log (stderr) contains `expected` and no ANSI escape
    /// codes: logs written to a pipe must be plain text.
    pub fn assert_plain_log(&self, expected: &str) {
        assert!(self.stderr.contains(expected), "{}", self.stderr);
        assert!(
            !self.stderr.contains('\u{1b}'),
            "ANSI codes in {:?}",
            self.stderr
        );
    }
}

/// Starts the binary `rounds` times (a fresh [`Command`] from `command` each time), sends
/// SIGTERM the instant its readiness line appears, and checks it exits cleanly each time;
/// `after` runs after each round (e.g. to check what the process left behind).
pub fn sigterm_at_readiness_rounds(
    rounds: usize,
    mut command: impl FnMut() -> Command,
    stream: Stream,
    ready: &str,
    mut after: impl FnMut(usize, &Terminated),
) {
    for round in 0..rounds {
        let run = sigterm_at_readiness(&mut command(), stream, ready);
        run.assert_clean_exit(round);
        after(round, &run);
    }
}

/// [`sigterm_at_readiness_rounds`] with nothing more to check after each round.
pub fn exits_cleanly_at_readiness(
    rounds: usize,
    command: impl FnMut() -> Command,
    stream: Stream,
    ready: &str,
) {
    sigterm_at_readiness_rounds(rounds, command, stream, ready, |_, _| {});
}

/// `program` with `args`, logging at level `info`, with colours left to the binary's own
/// choice (`NO_COLOR` removed): how the signal tests start a binary.
pub fn logging_command<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR");
    cmd
}

pub use libc::{SIGCONT, SIGKILL, SIGSTOP, SIGTERM};

/// Sends `signal` (e.g. [`SIGSTOP`]) to `pid` directly (kill(2), no `kill` child process in
/// between).
pub fn send_signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Sends SIGTERM to `pid` directly.
pub fn sigterm(pid: u32) -> std::io::Result<()> {
    send_signal(pid, libc::SIGTERM)
}

/// Runs `command` with stdout and stderr captured, sends SIGTERM as soon as a line starting
/// with `ready` appears on `stream` (no sleeping: the signal follows the read of the line),
/// then collects the rest of its output and its exit status.
///
/// # Panics
/// If the process cannot be started, or exits without printing the readiness line.
pub fn sigterm_at_readiness(command: &mut Command, stream: Stream, ready: &str) -> Terminated {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {command:?}: {e}"));
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let (watched, other): (Box<dyn Read + Send>, Box<dyn Read + Send>) = match stream {
        Stream::Stdout => (Box::new(out), Box::new(err)),
        Stream::Stderr => (Box::new(err), Box::new(out)),
    };
    // The other stream is drained meanwhile, so the child never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(other).read_to_string(&mut text);
        text
    });
    let mut reader = BufReader::new(watched);
    let mut seen = String::new();
    let mut ready_line = None;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        seen.push_str(&line);
        if line.starts_with(ready) {
            if let Err(e) = sigterm(child.id()) {
                panic!("SIGTERM to {command:?}: {e}");
            }
            ready_line = Some(line.trim_end().to_string());
            break;
        }
    }
    let _ = reader.read_to_string(&mut seen);
    let other_text = drain.join().unwrap_or_default();
    let status = child.wait().expect("waiting for the child");
    let (stdout, stderr) = match stream {
        Stream::Stdout => (seen, other_text),
        Stream::Stderr => (other_text, seen),
    };
    let Some(ready) = ready_line else {
        panic!(
            "{command:?} exited ({status}) without printing a line starting with {ready:?}\n\
             stdout:\n{stdout}\nstderr:\n{stderr}"
        );
    };
    Terminated {
        status,
        ready,
        stdout,
        stderr,
    }
}

/// The response to `GET /metrics` from `addr`, status line and headers included, or `None`
/// unless it answers 200: a scrape as Prometheus makes it, over a plain socket.
pub async fn scrape_metrics(addr: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.ok()?;
    socket
        .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    socket.read_to_string(&mut response).await.ok()?;
    response.starts_with("HTTP/1.1 200").then_some(response)
}
