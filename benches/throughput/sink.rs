//! The SMTP side, both ends Postfix's: `smtp-sink`, which every worker run
//! sends to, and `smtp-source`, which measures what that sink takes from a
//! client that is not ours (the SMTP limit every target is a ratio of).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `smtp-source`'s parallel sessions: the worker's default
/// `send_concurrency` and `smtp.pool_size`.
pub const SOURCE_SESSIONS: usize = 8;

/// Postfix's smtp-sink, as a child process.
pub struct Sink {
    pub port: u16,
    child: std::process::Child,
}

impl Sink {
    pub fn start() -> Self {
        let port = crate::worker::free_port();
        let mut cmd = Command::new("smtp-sink");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "nobody"]);
        }
        // -m: concurrent sessions; the last argument is the listen backlog.
        cmd.args(["-m", "256", &format!("127.0.0.1:{port}"), "1024"]);
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .expect("start smtp-sink (apt-get install postfix; see BENCHMARKS.md)");
        // From here on Drop kills and reaps it.
        let sink = Self { port, child };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return sink;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("smtp-sink did not start");
    }

    /// `smtp-source -s 8 -m messages -l bytes` against this sink:
    /// messages per second of its wall time. Without `reuse`, each message
    /// is a connection of its own, greeting to QUIT (the reference of the
    /// targets); with it (`-d`), each session sends its messages over one
    /// connection (a diagnostic).
    pub fn smtp_source(&self, messages: usize, bytes: usize, reuse: bool) -> f64 {
        let started = Instant::now();
        let out = Command::new("smtp-source")
            .args(reuse.then_some("-d"))
            .args([
                "-s",
                &SOURCE_SESSIONS.to_string(),
                "-m",
                &messages.to_string(),
                "-l",
                &bytes.to_string(),
                "-f",
                "billing@example.com",
                "-t",
                "customer@example.test",
                &format!("127.0.0.1:{}", self.port),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("start smtp-source (apt-get install postfix; see BENCHMARKS.md)");
        let secs = started.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "smtp-source failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        messages as f64 / secs
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
