//! Real processes for the fault suite: replicas (`invoice-reminder run`),
//! a redis-server of the test's own, and the checks every scenario ends
//! with. Every child is SIGKILLed when its handle drops, so a failing test
//! leaves no process behind.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::time::Instant;

use crate::common::{self, Backend, SmtpMode, World};

pub const BINARY: &str = env!("CARGO_BIN_EXE_invoice-reminder");

/// Makes the child die with the test process even if the test is killed
/// (a timeout, Ctrl-C) before its handles' Drop can run.
pub fn die_with_test(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Starts the child with at most `files` open file descriptors, as
/// `ulimit -n files` would.
fn limit_open_files(cmd: &mut Command, files: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls setrlimit, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: files,
                rlim_max: files,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A redis-server of the test's own, on its own port, keeping nothing on disk.
pub struct RedisServer {
    pub port: u16,
    /// `requirepass`, if the server was started with one.
    password: Option<String>,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A server that requires `password` (`requirepass`).
    pub async fn start_with_password(password: &str) -> Self {
        Self::start_with(Some(password.to_owned())).await
    }

    async fn start_with(password: Option<String>) -> Self {
        let mut server = Self {
            port: free_port(),
            password,
            child: None,
        };
        server.launch().await;
        server
    }

    /// The server's URL, with its password (percent-encoded) if it has one.
    pub fn url(&self) -> String {
        match &self.password {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(password) => format!(
                "redis://:{}@127.0.0.1:{}",
                percent_encoding::utf8_percent_encode(password, percent_encoding::NON_ALPHANUMERIC),
                self.port
            ),
        }
    }

    async fn launch(&mut self) {
        let mut cmd = Command::new("redis-server");
        if let Some(password) = &self.password {
            cmd.args(["--requirepass", password]);
        }
        let child = die_with_test(&mut cmd)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed? see README)");
        self.child = Some(child);
        let url = self.url();
        common::wait_until("redis-server answers", Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                match redis::Client::open(url) {
                    Ok(client) => match client.get_multiplexed_async_connection().await {
                        Ok(mut conn) => redis::cmd("PING")
                            .query_async::<String>(&mut conn)
                            .await
                            .is_ok(),
                        Err(_) => false,
                    },
                    Err(_) => false,
                }
            }
        })
        .await;
    }

    /// Kills the server: every key is gone, connections drop, new ones are refused.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A restart with an empty dataset, on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        self.launch().await;
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis-server")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One `invoice-reminder run` process.
pub struct Replica {
    pub name: String,
    child: Option<Child>,
    log: PathBuf,
    status: Option<ExitStatus>,
}

/// Debian's libfaketime (package `faketime`), thread-safe variant.
fn libfaketime() -> PathBuf {
    let candidates = ["x86_64-linux-gnu", "aarch64-linux-gnu", ""];
    candidates
        .iter()
        .map(|arch| PathBuf::from(format!("/usr/lib/{arch}/faketime/libfaketimeMT.so.1")))
        .find(|p| p.exists())
        .expect("libfaketime not found: apt-get install faketime (see README)")
}

/// How to start a replica.
#[derive(Clone, Default)]
pub struct ReplicaOptions {
    /// Extra `INVOICE_REMINDER__...` variables (after the world's).
    pub env: Vec<(String, String)>,
    /// Run with libfaketime at this offset, e.g. "-2s" (the clock 2 s
    /// behind), or from this start date, e.g. "@2027-01-10 23:59:57" (UTC).
    pub faketime: Option<String>,
    /// Override the replica_id (default: the replica's name).
    pub replica_id: Option<String>,
    /// The subcommand and its arguments (default: `run`).
    pub command: Vec<String>,
    /// `ulimit -n` (soft and hard) for the process, set before it starts.
    pub max_open_files: Option<u64>,
}

impl Replica {
    pub fn spawn(world: &World, name: &str, options: ReplicaOptions) -> Self {
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("replica-{}-{name}.log", world.db.name));
        let file = std::fs::File::create(&log).expect("replica log file");
        let mut cmd = Command::new(BINARY);
        cmd.arg("--config")
            .arg(common::default_config_path())
            .args(if options.command.is_empty() {
                vec!["run".to_owned()]
            } else {
                options.command.clone()
            })
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(world.env())
            .env(
                "INVOICE_REMINDER__REPLICA_ID",
                options
                    .replica_id
                    .clone()
                    .unwrap_or_else(|| name.to_owned()),
            )
            .envs(options.env.iter().cloned())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file));
        if let Some(offset) = &options.faketime {
            // libfaketime preloaded into the replica itself (not the
            // `faketime` wrapper, which would stand between us and the
            // process we signal).
            cmd.env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", offset)
                .env("TZ", "UTC");
            if offset.starts_with('@') {
                // A start date ("@2027-01-10 23:59:57"): fake the wall clock
                // only; the runtime's timers keep the real monotonic clock.
                cmd.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            }
        }
        if let Some(files) = options.max_open_files {
            limit_open_files(&mut cmd, files);
        }
        let child = die_with_test(&mut cmd)
            .spawn()
            .expect("start invoice-reminder");
        Self {
            name: name.to_owned(),
            child: Some(child),
            log,
            status: None,
        }
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().expect("running").id() as i32)
    }

    fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal replica");
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            self.status = child.wait().ok();
        }
    }

    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    pub fn terminate(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.status = Some(status);
                self.child = None;
                return Some(status);
            }
            if self.child.is_none() {
                return self.status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and wait for a clean exit.
    pub async fn stop_gracefully(&mut self) -> Option<ExitStatus> {
        if self.child.is_none() {
            return self.status;
        }
        self.resume();
        self.terminate();
        self.wait_exit(Duration::from_secs(30)).await
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        }
        self.kill();
    }
}

/// Where a scenario's replicas read invoices from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The default view over the demo tables.
    Demo,
    /// A view of the user's own in another schema over the same rows (text
    /// keys, amounts in major units, a payment link per invoice).
    UserView,
}

/// A world for `backend` reading invoices from `source`.
pub async fn world_with(backend: Backend, source: Source) -> World {
    let mut world = world_for(backend).await;
    if source == Source::UserView {
        common::billing::use_user_view_over_demo_tables(&mut world).await;
    }
    world
}

/// A world for `backend` with fast replica defaults.
pub async fn world_for(backend: Backend) -> World {
    let mut world = World::new().await;
    fast_replicas(&mut world);
    backend.configure(&mut world);
    world
}

/// The test's defaults for replicas: a fast cron and a short lock.
pub fn fast_replicas(world: &mut World) {
    world
        .set("schedule.cron", "*/1 * * * * *")
        .set("lock.ttl", "2s")
        .set("lock.renew_every", "400ms")
        .set("lock.min_hold", "0s")
        .set("redis.timeout", "500ms")
        .set("database.connect_timeout", "2s")
        .set("shutdown.timeout", "20s")
        // "auto" would be 20 s with a 1 s cron; a loaded CI machine can
        // stretch a legitimate tick (or a paused one) past that.
        .set("schedule.max_tick_duration", "5m")
        .set("log.level", "info");
}

/// Settings under which a backlog takes seconds, so a test can act
/// mid-batch: batches of 50, two sends at a time, 10 ms per message at the
/// SMTP server.
pub fn slow_down(world: &mut World) {
    world
        .set("reminders.batch_size", 50)
        .set("reminders.send_concurrency", 2);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(10)));
}

/// Inserts `invoices` overdue invoices, starts `replicas` replicas and
/// waits until `mails` reminders have arrived.
pub async fn start_mid_backlog(
    world: &World,
    invoices: i64,
    replicas: usize,
    mails: usize,
) -> Vec<Replica> {
    common::insert_overdue(world.pool(), invoices).await;
    let started = spawn_replicas(world, replicas);
    common::wait_until(
        &format!("{mails} mails arrive"),
        Duration::from_secs(60),
        || async { world.sink.count() >= mails },
    )
    .await;
    started
}

/// SIGTERM to every replica still running, and wait for each to exit.
pub async fn stop_all(replicas: &mut [Replica]) {
    for r in replicas {
        r.stop_gracefully().await;
    }
}

/// Waits until at least `n` runs (ticks that took the lock) were recorded.
pub async fn wait_for_runs(world: &World, n: i64, timeout: Duration) {
    common::wait_until(&format!("{n} ticks were worked"), timeout, || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM job_runs")
            .fetch_one(world.pool())
            .await
            .expect("count runs")
            >= n
    })
    .await;
}

pub fn spawn_replicas(world: &World, count: usize) -> Vec<Replica> {
    (1..=count)
        .map(|i| Replica::spawn(world, &format!("r{i}"), ReplicaOptions::default()))
        .collect()
}

/// Runs `invoice-reminder audit --json --unknown-after 0s` as an operator would.
pub async fn audit(world: &World) -> (i32, Value) {
    let out = tokio::process::Command::new(BINARY)
        .arg("--config")
        .arg(common::default_config_path())
        .args(["audit", "--json", "--unknown-after", "0s"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .output()
        .await
        .expect("run audit");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "audit printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

/// Where the reminders stand, straight from the table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub sent: i64,
    pub sending: i64,
    pub failed: i64,
    pub discarded: i64,
    /// Overdue invoices with no reminder row.
    pub missing: i64,
    /// Runs not finished (running now, or their process died).
    pub open_runs: i64,
}

pub async fn tally(world: &World) -> Tally {
    let mut conn = world.pool().acquire().await.expect("a connection");
    tally_on(&mut conn, &[]).await
}

/// [`tally`] on one connection: inside a REPEATABLE READ transaction all
/// its counts come from one snapshot. Invoices in `skipped` (source
/// problems, never reminded) are not missing.
async fn tally_on(conn: &mut sqlx::PgConnection, skipped: &[i64]) -> Tally {
    let (sent, sending, failed, discarded): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'sent'),
                count(*) FILTER (WHERE status = 'sending'),
                count(*) FILTER (WHERE status = 'failed'),
                count(*) FILTER (WHERE status = 'discarded')
           FROM reminders",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("tally reminders");
    let missing: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invoices i
          WHERE i.paid_at IS NULL AND i.due_date < current_date - 3 AND NOT i.id = ANY($1)
            AND NOT EXISTS (SELECT 1 FROM reminders r WHERE r.invoice_id = i.id::text)",
    )
    .bind(skipped)
    .fetch_one(&mut *conn)
    .await
    .expect("count missing");
    let open_runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE finished_at IS NULL")
            .fetch_one(&mut *conn)
            .await
            .expect("count open runs");
    Tally {
        sent,
        sending,
        failed,
        discarded,
        missing,
        open_runs,
    }
}

/// Waits until every overdue invoice has a final reminder (sent or
/// discarded) or one a replica in `dead` started and left `sending`
/// (unknown), and no live replica is mid-tick.
pub async fn wait_until_settled(world: &World, dead: &[&str], timeout: Duration) -> Tally {
    wait_until_settled_skipping(world, dead, &[], timeout).await
}

/// [`wait_until_settled`], with the invoices in `skipped` (source problems)
/// expected never to be reminded.
pub async fn wait_until_settled_skipping(
    world: &World,
    dead: &[&str],
    skipped: &[i64],
    timeout: Duration,
) -> Tally {
    let dead: Vec<String> = dead.iter().map(|s| s.to_string()).collect();
    let deadline = Instant::now() + timeout;
    loop {
        // One snapshot for every count: read separately, a row returned
        // (deleted) by a live replica between the "missing" count and the
        // "sending" count would be in neither, and the world would look
        // settled while that invoice still waits to be re-claimed.
        let mut tx = world.pool().begin().await.expect("begin");
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await
            .expect("repeatable read");
        let t = tally_on(&mut tx, skipped).await;
        // A dead replica's rows count as settled only if it started them
        // (unknown); rows it never started must be returned and sent.
        let live_sending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM reminders r JOIN job_runs j ON j.id = r.run_id
              WHERE r.status = 'sending'
                AND ((j.finished_at IS NULL AND NOT (j.replica_id = ANY($1)))
                     OR r.started_at IS NULL)",
        )
        .bind(&dead)
        .fetch_one(&mut *tx)
        .await
        .expect("count live sending");
        drop(tx);
        if t.missing == 0 && t.failed == 0 && live_sending == 0 {
            return t;
        }
        if Instant::now() >= deadline {
            panic!(
                "not settled after {timeout:?}: {t:?}, sending by live replicas: {live_sending}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The promise, checked from the database AND from the mail received:
/// no (invoice, period) mailed twice; every overdue invoice reminded,
/// except rows audit reports as unknown, and at most `max_unknown` of those.
/// Returns the audit report.
pub async fn assert_exactly_once(world: &World, max_unknown: usize) -> Value {
    assert_exactly_once_skipping(world, max_unknown, &[]).await
}

/// [`assert_exactly_once`], with the invoices in `skipped` expected never
/// to be reminded and listed by audit as source problems instead.
pub async fn assert_exactly_once_skipping(
    world: &World,
    max_unknown: usize,
    skipped: &[i64],
) -> Value {
    let (code, report) = audit(world).await;
    assert_eq!(code, 0, "audit found duplicates: {report}");
    assert_eq!(report["duplicates"].as_array().map(Vec::len), Some(0));

    let received = world.sink.received();
    let mut mailed: HashMap<(Option<i64>, Option<String>), usize> = HashMap::new();
    for mail in &received {
        *mailed
            .entry((mail.invoice_id(), mail.period()))
            .or_default() += 1;
    }
    let twice: Vec<_> = mailed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "mailed twice: {twice:?}");

    let unknown: HashSet<i64> = report["unknown"]
        .as_array()
        .expect("unknown list")
        .iter()
        .filter_map(|u| u["invoice_id"].as_str().and_then(|s| s.parse::<i64>().ok()))
        .collect();
    assert!(
        unknown.len() <= max_unknown,
        "{} unknown deliveries, at most {max_unknown} expected: {unknown:?}",
        unknown.len()
    );
    let mut listed: Vec<i64> = report["source_problems"]
        .as_array()
        .expect("source problems list")
        .iter()
        .filter_map(|p| p["invoice_id"].as_str().and_then(|s| s.parse().ok()))
        .collect();
    listed.sort();
    let mut expected = skipped.to_vec();
    expected.sort();
    assert_eq!(listed, expected, "source problems: {report}");
    assert_eq!(
        report["missing_count"].as_i64(),
        Some(skipped.len() as i64),
        "overdue invoices never reminded (besides the source problems): {report}"
    );
    let failed: Vec<&Value> = report["failed"]
        .as_array()
        .expect("failed list")
        .iter()
        .filter(|f| f["status"] == "failed")
        .collect();
    assert!(
        failed.is_empty(),
        "reminders still waiting for a retry: {failed:?}"
    );

    let mail_ids: HashSet<i64> = received.iter().filter_map(|m| m.invoice_id()).collect();
    let sent_ids: HashSet<i64> = sqlx::query_scalar::<_, i64>(
        "SELECT invoice_id::bigint FROM reminders WHERE status = 'sent'",
    )
    .fetch_all(world.pool())
    .await
    .expect("sent ids")
    .into_iter()
    .collect();
    let recorded_not_received: Vec<_> = sent_ids.difference(&mail_ids).collect();
    assert!(
        recorded_not_received.is_empty(),
        "recorded sent but never received: {recorded_not_received:?}"
    );
    let received_not_recorded: Vec<_> = mail_ids
        .difference(&sent_ids)
        .filter(|id| !unknown.contains(id))
        .collect();
    assert!(
        received_not_recorded.is_empty(),
        "received but neither recorded sent nor reported unknown: {received_not_recorded:?}"
    );
    report
}

/// Pairs of job_runs whose intervals intersect.
pub async fn overlapping_runs(world: &World) -> Vec<(i64, i64)> {
    invoice_reminder::db::runs::overlapping_runs(&world.database())
        .await
        .expect("overlaps")
}

/// Inserts overdue invoices in the background, `per_round` every `every`,
/// for `rounds` rounds: new work keeps arriving while replicas run.
pub fn keep_adding_overdue(
    world: &World,
    per_round: i64,
    every: Duration,
    rounds: usize,
) -> tokio::task::JoinHandle<i64> {
    let pool = world.pool().clone();
    tokio::spawn(async move {
        let mut added = 0;
        for _ in 0..rounds {
            added += common::insert_overdue(&pool, per_round).await.len() as i64;
            tokio::time::sleep(every).await;
        }
        added
    })
}
