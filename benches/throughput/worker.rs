//! A worker build run as an operator runs it: the real binary as a child
//! process, with its own `default.toml` as it is, pointed at one database,
//! Redis and the sink by `INVOICE_REMINDER__*` variables (only the keys that
//! build has: every version refuses unknown keys), and what each run cost:
//! rate, peak RSS, CPU seconds and the database's own counters.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::common;

/// One database a worker build runs on, dropped with it.
pub struct BenchDb {
    pub name: String,
    pub url: String,
    /// Where that build's tables are: `invoice_reminder`, or `public` for
    /// builds before the own schema; set by [`Worker::create`].
    pub schema: String,
    /// The bench's own connections to it.
    pub pool: PgPool,
    /// Dropping this drops the database (after everything above).
    _db: common::TestDb,
}

impl BenchDb {
    pub fn new(db: common::TestDb, pool: PgPool) -> Self {
        Self {
            name: db.name.clone(),
            url: db.url.clone(),
            schema: String::new(),
            pool,
            _db: db,
        }
    }

    /// Empties every table the bench writes (invoices too).
    pub async fn reset_all(&self) {
        crate::seed::reset_all(&self.pool, &self.schema).await;
    }

    /// Empties what a run writes (reminders, runs, fences), keeping the
    /// backlog.
    pub async fn reset_runs(&self) {
        crate::seed::reset_runs(&self.pool, &self.schema).await;
    }
}

/// One `run-once`.
pub struct Run {
    /// Reminders per second: sent / (`job_runs.finished_at - started_at`).
    pub rate: f64,
    /// That run's duration by its own `job_runs` row, seconds.
    pub secs: f64,
    pub rss_kib: i64,
    /// User plus system CPU of the child, all threads.
    pub cpu_secs: f64,
    pub sent: i64,
    /// What it cost the database, when measured.
    pub cost: Option<DbCost>,
}

/// `pg_stat_database` deltas of the bench database around one child, and
/// from its own statistics views: rows PostgreSQL read (`seq_tup_read` of
/// every table and `idx_tup_read` of every index) and the updates of
/// `reminders` that were HOT (no index entries).
#[derive(Clone, Copy, Default)]
pub struct DbCost {
    pub commits: i64,
    pub inserted: i64,
    pub updated: i64,
    pub rows_read: i64,
    pub hot_updated: i64,
}

/// One operator command (`audit`, `check-source`): how long and how it
/// ended.
pub struct CommandRun {
    pub name: String,
    pub secs: f64,
    pub code: i32,
    pub stdout_lines: usize,
    /// The last lines it wrote to stderr (the error, on failure).
    pub stderr_tail: String,
}

/// A worker build and its database.
pub struct Worker {
    pub label: String,
    pub binary: PathBuf,
    pub config: PathBuf,
    /// That build's `default.toml`: the keys it knows.
    defaults: toml::Table,
    pub db: BenchDb,
}

impl Worker {
    /// The build, on `db` migrated by its own `migrate`.
    pub async fn create(label: &str, binary: PathBuf, config: PathBuf, db: BenchDb) -> Self {
        let defaults = std::fs::read_to_string(&config)
            .ok()
            .and_then(|s| s.parse::<toml::Table>().ok())
            .unwrap_or_else(|| panic!("read {}", config.display()));
        let mut worker = Self {
            label: label.to_owned(),
            binary,
            config,
            defaults,
            db,
        };
        let out = worker.command("migrate").await;
        assert_eq!(
            out.code, 0,
            "{} migrate failed: {}",
            worker.label, out.stderr_tail
        );
        worker.db.schema = sqlx::query_scalar(
            "SELECT CASE WHEN to_regclass('invoice_reminder.invoices') IS NOT NULL
                         THEN 'invoice_reminder' ELSE 'public' END",
        )
        .fetch_one(&worker.db.pool)
        .await
        .expect("find the schema");
        worker
    }

    /// Whether this build's default.toml has `dotted` (`http.listen`).
    fn has_key(&self, dotted: &str) -> bool {
        let mut table = &self.defaults;
        let mut parts = dotted.split('.').peekable();
        while let Some(part) = parts.next() {
            match table.get(part) {
                Some(toml::Value::Table(t)) if parts.peek().is_some() => table = t,
                Some(_) if parts.peek().is_none() => return true,
                _ => return false,
            }
        }
        false
    }

    /// The variables that point this build at the bench: only keys it has,
    /// then `extra` (which must be keys it has).
    pub fn env(&self, smtp_port: u16, extra: &[(&str, String)]) -> Vec<(String, String)> {
        let pointing = [
            ("database.url", self.db.url.clone()),
            ("redis.url", common::redis_url()),
            (
                "lock.key",
                format!("{}{}:lock", *KEY_PREFIX, uuid::Uuid::new_v4().simple()),
            ),
            ("smtp.port", smtp_port.to_string()),
            ("http.listen", format!("127.0.0.1:{}", free_port())),
        ];
        pointing
            .into_iter()
            .filter(|(key, _)| self.has_key(key))
            .chain(extra.iter().map(|(k, v)| (*k, v.clone())))
            .map(|(key, value)| (env_name(key), value))
            .collect()
    }

    /// Starts `run-once` with `env`; its stderr goes to its log file.
    pub fn spawn_run_once(&self, env: Vec<(String, String)>) -> Child {
        std::process::Command::new(&self.binary)
            .arg("--config")
            .arg(&self.config)
            .arg("run-once")
            .envs(env)
            .stdout(Stdio::null())
            .stderr(self.log_file())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.binary.display()))
    }

    /// `run-once` over the backlog of `expected` invoices, which it must
    /// send in full. With `measure_db`, the database's counters around it
    /// (not through a pooler: the bench waits for the child's backends to
    /// end).
    pub async fn run_once(
        &self,
        smtp_port: u16,
        expected: usize,
        extra: &[(&str, String)],
        measure_db: bool,
    ) -> Run {
        let stats = match measure_db {
            true => Some(Stats::connect().await),
            false => None,
        };
        let before = match &stats {
            Some(s) => Some(s.before_child(&self.db).await),
            None => None,
        };
        let child = self.spawn_run_once(self.env(smtp_port, extra));
        let reaped = tokio::task::spawn_blocking(move || reap(child))
            .await
            .expect("reap");
        if reaped.code != 0 {
            panic!(
                "{} run-once exited with {}; its log ({}):\n{}",
                self.label,
                reaped.code,
                self.log_path().display(),
                tail(&self.log_path(), 20)
            );
        }
        let cost = match (&stats, before) {
            (Some(s), Some(before)) => Some(s.after_child(&self.db, before).await),
            _ => None,
        };
        let (sent, secs): (i32, f64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT sent, extract(epoch FROM finished_at - started_at)::float8
               FROM {}.job_runs ORDER BY id DESC LIMIT 1",
            self.db.schema
        )))
        .fetch_one(&self.db.pool)
        .await
        .expect("read the run");
        assert_eq!(
            sent as usize,
            expected,
            "{}: the run did not send the whole backlog (log: {})",
            self.label,
            self.log_path().display()
        );
        Run {
            rate: f64::from(sent) / secs,
            secs,
            rss_kib: reaped.peak_kib,
            cpu_secs: reaped.cpu_secs,
            sent: i64::from(sent),
            cost,
        }
    }

    /// Runs one subcommand with the default settings pointed at the bench
    /// database, timed from spawn to exit.
    pub async fn command(&self, name: &str) -> CommandRun {
        let mut cmd = std::process::Command::new(&self.binary);
        // Only the database and Redis: these commands send no mail.
        let env = self
            .env(25, &[])
            .into_iter()
            .filter(|(key, _)| key == &env_name("database.url") || key == &env_name("redis.url"));
        cmd.arg("--config").arg(&self.config).arg(name).envs(env);
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let out = cmd.output().unwrap_or_else(|e| panic!("start {name}: {e}"));
            let secs = started.elapsed().as_secs_f64();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            CommandRun {
                name,
                secs,
                code: out.status.code().unwrap_or(-1),
                stdout_lines: out.stdout.split(|&b| b == b'\n').count().saturating_sub(1),
                stderr_tail: lines[lines.len().saturating_sub(3)..].join("\n"),
            }
        })
        .await
        .expect("command")
    }

    fn log_path(&self) -> PathBuf {
        let name: String = self
            .label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        crate::target_dir()
            .join("bench-logs")
            .join(format!("{name}.log"))
    }

    /// The run's stderr, overwritten by each run (the worker logs at its
    /// default level, info: a few lines per tick).
    fn log_file(&self) -> std::fs::File {
        let path = self.log_path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("log dir");
        }
        std::fs::File::create(&path).expect("log file")
    }
}

/// `INVOICE_REMINDER__SECTION__KEY` for `section.key`.
fn env_name(dotted: &str) -> String {
    format!(
        "INVOICE_REMINDER__{}",
        dotted.to_uppercase().replace('.', "__")
    )
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A reaped child.
pub struct Reaped {
    pub code: i32,
    pub peak_kib: i64,
    pub cpu_secs: f64,
}

/// Waits for the child: exit code, peak RSS, CPU seconds.
pub fn reap(child: Child) -> Reaped {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // Peak RSS is the child's `VmHWM`, read every 20 ms until it exits (the
    // mark only grows, so at most the last 20 ms are missed), not wait4's
    // `ru_maxrss`: Linux folds the pre-exec address space's high-water mark
    // into that, and a spawned child's pre-exec space is this process's.
    let mut peak_kib = 0;
    loop {
        peak_kib = peak_kib.max(vm_hwm_kib(pid).unwrap_or(0));
        // SAFETY: pid is our child; status and usage are plain data wait4
        // fills in.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            break;
        }
        assert_eq!(reaped, 0, "wait4");
        std::thread::sleep(Duration::from_millis(20));
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    std::mem::forget(child); // already reaped
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Reaped {
        code,
        peak_kib,
        cpu_secs: secs(usage.ru_utime) + secs(usage.ru_stime),
    }
}

/// `VmHWM` (peak resident set, KiB) of a live process.
fn vm_hwm_kib(pid: libc::pid_t) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Reads `pg_stat_database` from the maintenance database, so that reading
/// adds nothing to the bench database's own counters.
pub struct Stats {
    admin: PgPool,
}

/// The counters and the bench's own backends just before a child starts.
pub struct Before {
    counters: DbCost,
    own_pids: Vec<i32>,
}

impl Stats {
    pub async fn connect() -> Self {
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&common::postgres_admin_url())
            .await
            .expect("connect to the maintenance database");
        Self { admin }
    }

    /// Flushes the bench's own pending statistics for `db` (each of its
    /// connections, `pg_stat_force_next_flush()`: a backend otherwise
    /// reports up to a second later, possibly during the child's run), then
    /// reads the counters and which backends are the bench's.
    pub async fn before_child(&self, db: &BenchDb) -> Before {
        let (rows_read, hot_updated) = read_and_hot(db).await;
        let mut held = Vec::new();
        for _ in 0..db.pool.size() {
            let mut conn = db.pool.acquire().await.expect("acquire");
            sqlx::query("SELECT pg_stat_force_next_flush()")
                .execute(&mut *conn)
                .await
                .expect("flush statistics");
            held.push(conn);
        }
        drop(held);
        let own_pids = self.client_pids(&db.name).await;
        Before {
            counters: DbCost {
                rows_read,
                hot_updated,
                ..self.counters(&db.name).await
            },
            own_pids,
        }
    }

    /// Waits until the child's backends have ended (a backend reports its
    /// statistics as it exits), then returns the counters' deltas.
    pub async fn after_child(&self, db: &BenchDb, before: Before) -> DbCost {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pids = self.client_pids(&db.name).await;
            if pids.iter().all(|p| before.own_pids.contains(p)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the worker's backends did not end"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let after = self.counters(&db.name).await;
        let (rows_read, hot_updated) = read_and_hot(db).await;
        DbCost {
            commits: after.commits - before.counters.commits,
            inserted: after.inserted - before.counters.inserted,
            updated: after.updated - before.counters.updated,
            rows_read: rows_read - before.counters.rows_read,
            hot_updated: hot_updated - before.counters.hot_updated,
        }
    }

    async fn client_pids(&self, datname: &str) -> Vec<i32> {
        sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
              WHERE datname = $1 AND backend_type = 'client backend'",
        )
        .bind(datname)
        .fetch_all(&self.admin)
        .await
        .expect("pg_stat_activity")
    }

    async fn counters(&self, datname: &str) -> DbCost {
        let (commits, inserted, updated): (i64, i64, i64) = sqlx::query_as(
            "SELECT xact_commit, tup_inserted, tup_updated FROM pg_stat_database WHERE datname = $1",
        )
        .bind(datname)
        .fetch_one(&self.admin)
        .await
        .expect("pg_stat_database");
        DbCost {
            commits,
            inserted,
            updated,
            ..DbCost::default()
        }
    }
}

/// Rows read in `db` so far (every table's `seq_tup_read` and every
/// index's `idx_tup_read`), and HOT updates of `reminders`: only a session
/// of the database itself sees them, so they are read on the bench's own
/// pool (reading them reads no user table).
async fn read_and_hot(db: &BenchDb) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT COALESCE(sum(seq_tup_read), 0) FROM pg_stat_user_tables)::bigint
              + (SELECT COALESCE(sum(idx_tup_read), 0) FROM pg_stat_user_indexes)::bigint,
                (SELECT COALESCE(sum(n_tup_hot_upd), 0) FROM pg_stat_user_tables
                  WHERE relname = 'reminders')::bigint",
    )
    .fetch_one(&db.pool)
    .await
    .expect("read statistics views")
}

/// All lock keys of one benchmark run live under this prefix (deleted at the end).
pub static KEY_PREFIX: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("ir-bench:{}:", uuid::Uuid::new_v4().simple()));

/// Deletes this run's lock and fence keys.
pub async fn delete_bench_keys() {
    let Ok(client) = redis::Client::open(common::redis_url()) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", *KEY_PREFIX))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
}
