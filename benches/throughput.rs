//! Throughput benchmark: one command, real services.
//!
//! ```text
//! cargo bench --bench throughput
//! BENCH_SIZES=1000,10000 BENCH_NAIVE_MAX=10000 cargo bench --bench throughput   # quicker
//! BENCH_EXTRAS=0 ...   # the backlog table only: no 1M ledger, UUID view, PgBouncer or lock theft
//! BENCH_BINARY=/path/to/invoice-reminder ...   # end-to-end with another build
//! BENCH_ROUNDS=1 ...   # measure each rate once (default 3, interleaved, medians shown)
//! ```
//!
//! Needs PostgreSQL and Redis (the same defaults and `TEST_POSTGRES_URL` /
//! `TEST_REDIS_URL` overrides as the tests) and Postfix's `smtp-sink`
//! (`apt-get install postfix`, "No configuration"), a fast local SMTP sink.
//! It seeds its own database, prints one table, and drops the database.
//!
//! What it measures, for each backlog size (overdue invoices):
//! * end-to-end: `invoice-reminder run-once` (the release binary, as a
//!   child process) working the whole backlog; reminders/s from the run's
//!   `job_runs` row; the child's peak RSS (`VmHWM`, polled);
//! * naive: the straightforward loop (one INSERT, one fresh SMTP connection,
//!   one UPDATE per invoice, sequentially);
//! * db-only: the worker's claim and status statements alone (no mail);
//! * smtp-only: the worker's mailer alone, same pool and concurrency (no
//!   database);
//!
//! end-to-end, db-only and smtp-only each `BENCH_ROUNDS` times (default 3),
//! interleaved, reported as medians (peak RSS too);
//!
//! and the overdue index: a tick over 1k overdue invoices among 1M paid
//! ones versus among 1k paid ones.

#[allow(unused_imports)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use futures::StreamExt;
use invoice_reminder::config::{ConfigSource, Settings};
use invoice_reminder::db;
use invoice_reminder::db::Db;
use invoice_reminder::db::invoices::Owed;
use invoice_reminder::domain::{
    Amount, Attempted, Customer, Delivery, Invoice, InvoiceId, ReminderId,
};
use invoice_reminder::mail::{self, Mailer, Templates};
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::extension::ClientId;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// The worker binary the end-to-end cases run; `BENCH_BINARY` names another
/// build (say, of an older commit) to compare two in one run.
fn binary() -> std::path::PathBuf {
    std::env::var_os("BENCH_BINARY").map_or_else(
        || env!("CARGO_BIN_EXE_invoice-reminder").into(),
        std::path::PathBuf::from,
    )
}
const BATCH_SIZE: u32 = 500;
const CONCURRENCY: u32 = 16;

struct Row {
    size: usize,
    e2e: f64,
    naive: Option<f64>,
    db_only: f64,
    smtp_only: f64,
    rss_kib: i64,
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench());
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

async fn bench() {
    let sizes = env_list("BENCH_SIZES", "1000,10000,100000");
    let naive_max: usize = std::env::var("BENCH_NAIVE_MAX")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let sink = Sink::start();
    // A fresh migrated database, dropped at the end (the tests' helper).
    let bench_db = common::TestDb::create().await;
    let settings = settings(&bench_db.url, sink.port);
    // The worker's own connection options (application_name, plan cache mode).
    let worker_pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(settings.pg_connect_options())
        .await
        .expect("connect");
    let pool = &worker_pool;

    println!("invoice-reminder throughput benchmark");
    println!(
        "machine: {} cores; {}; smtp-sink on 127.0.0.1:{}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "cpu unknown".into()),
        sink.port
    );
    println!(
        "worker settings: batch_size {BATCH_SIZE}, send_concurrency {CONCURRENCY}, smtp.pool_size {CONCURRENCY}, redis lock, default stages and templates (HTML + text)"
    );
    let per_message = rendering_cost(&settings, 20_000);
    println!(
        "rendering and building one message (default templates, HTML + text, one thread): {:.1} µs\n",
        per_message.as_secs_f64() * 1e6
    );

    // The three rates of a row are each measured `rounds` times,
    // interleaved, and the row shows their medians: on a shared 2-core VM a
    // neighbour's burst during one measurement moved the ratio by ±20 points.
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(3)
        .max(1);
    let mut rows = Vec::new();
    for &size in &sizes {
        reset(pool).await;
        seed_overdue(pool, size as i64, 0).await;
        let naive = if size <= naive_max {
            let r = naive_loop(pool, &settings, sink.port).await;
            reset_reminders(pool).await;
            Some(r)
        } else {
            None
        };
        let (mut e2e, mut db, mut smtp, mut rss) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (rate, kib) = end_to_end(&bench_db.url, sink.port, size).await;
            reset_reminders(pool).await;
            e2e.push(rate);
            rss.push(kib as f64 / 1024.0);
            db.push(db_only(pool, &settings).await);
            reset_reminders(pool).await;
            smtp.push(smtp_only(pool, &settings, size).await);
        }
        let row = Row {
            size,
            e2e: median(&e2e),
            naive,
            db_only: median(&db),
            smtp_only: median(&smtp),
            rss_kib: (median(&rss) * 1024.0) as i64,
        };
        print_row(&row);
        if rounds > 1 {
            println!(
                "{:>8}  runs: end-to-end {}; db-only {}; smtp-only {}; peak RSS {} MiB",
                "",
                list(&e2e, 0),
                list(&db, 0),
                list(&smtp, 0),
                list(&rss, 1)
            );
        }
        rows.push(row);
    }

    if std::env::var("BENCH_EXTRAS").as_deref() == Ok("0") {
        // The backlog table only (a quick check while changing the scan).
        delete_bench_keys().await;
        return;
    }

    // The overdue index: cost should follow overdue invoices, not the ledger.
    reset(pool).await;
    seed_overdue(pool, 1000, 1000).await;
    let small = tick_and_scan(&bench_db.url, sink.port, pool, &settings).await;
    reset(pool).await;
    seed_overdue(pool, 1000, 1_000_000).await;
    let large = tick_and_scan(&bench_db.url, sink.port, pool, &settings).await;

    // The source as a team has it: a view over a UUID-keyed table.
    reset(pool).await;
    let uuid = uuid_source_case(&bench_db.url, sink.port, pool, 10_000, 990_000).await;

    // The same 10k backlog direct and through PgBouncer (transaction mode).
    reset(pool).await;
    let (direct, pooled) = pooler_case(&bench_db.url, sink.port, pool, 10_000).await;

    // Cancellation under full load.
    reset(pool).await;
    seed_overdue(pool, 100_000, 0).await;
    let (stopped_ms, after, outcome) = lock_loss_under_load(&bench_db.url, sink.port, pool).await;

    println!();
    println!(
        "lock stolen at 20k of a 100k tick (renew_every 200ms): the run ended {stopped_ms:.0} ms \
         later, outcome {outcome}; {after} reminders recorded after the theft (an upper bound: \
         it includes results of mail sent before the theft and written after it)"
    );
    println!(
        "1k overdue among 1k paid:  tick {:>7.1} ms, overdue scan {:>6.2} ms",
        small.0, small.1
    );
    println!(
        "1k overdue among 1M paid:  tick {:>7.1} ms, overdue scan {:>6.2} ms",
        large.0, large.1
    );
    println!(
        "view over a UUID-keyed table, 10k open among 1M: end-to-end {:.0}/s, tick {:.0} ms, \
         scan {:.1} ms",
        uuid.0, uuid.1, uuid.2
    );
    println!(
        "10k backlog direct: {direct:.0}/s; through PgBouncer 1.18 (pool_mode = transaction, \
         database.pooler = \"transaction\"): {pooled:.0}/s ({:+.0}%)",
        100.0 * (pooled / direct - 1.0)
    );
    println!();
    summarize(&rows, small, large);
    delete_bench_keys().await;
    drop(bench_db);
    drop(sink);
}

fn print_row(r: &Row) {
    if r.size == 0 {
        return;
    }
    static HEADER: std::sync::Once = std::sync::Once::new();
    HEADER.call_once(|| {
        println!(
            "{:>8}  {:>12}  {:>9}  {:>8}  {:>11}  {:>11}  {:>14}  {:>10}",
            "backlog",
            "end-to-end/s",
            "naive/s",
            "vs naive",
            "db-only/s",
            "smtp-only/s",
            "e2e/slower lim",
            "peak RSS"
        );
    });
    let slower = r.db_only.min(r.smtp_only);
    println!(
        "{:>8}  {:>12.0}  {:>9}  {:>8}  {:>11.0}  {:>11.0}  {:>13.0}%  {:>7.1} MiB",
        r.size,
        r.e2e,
        r.naive
            .map(|n| format!("{n:.0}"))
            .unwrap_or_else(|| "-".into()),
        r.naive
            .map(|n| format!("{:.1}x", r.e2e / n))
            .unwrap_or_else(|| "-".into()),
        r.db_only,
        r.smtp_only,
        100.0 * r.e2e / slower,
        r.rss_kib as f64 / 1024.0
    );
}

fn summarize(rows: &[Row], small: (f64, f64), large: (f64, f64)) {
    let at = |n: usize| rows.iter().find(|r| r.size == n);
    println!("targets:");
    if let Some(r) = at(10_000)
        && let Some(naive) = r.naive
    {
        let x = r.e2e / naive;
        println!(
            "  end-to-end >= 5x naive at 10k:            {x:.1}x  {}",
            verdict(x >= 5.0)
        );
    }
    if let Some(r) = at(100_000) {
        let share = r.e2e / r.db_only.min(r.smtp_only);
        println!(
            "  end-to-end >= 60% of slower limit at 100k: {:.0}%  {}",
            share * 100.0,
            verdict(share >= 0.6)
        );
    }
    if let (Some(a), Some(b)) = (at(10_000), at(100_000)) {
        let ratio = b.rss_kib as f64 / a.rss_kib as f64;
        println!(
            "  peak RSS 100k <= 1.5x 10k:                 {ratio:.2}x  {}",
            verdict(ratio <= 1.5)
        );
    }
    let ratio = large.0 / small.0;
    println!(
        "  1k-among-1M tick <= 2x 1k-among-1k:        {ratio:.2}x  {}",
        verdict(ratio <= 2.0)
    );
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// `values` joined with "/", each with `decimals` decimals.
fn list(values: &[f64], decimals: usize) -> String {
    values
        .iter()
        .map(|v| format!("{v:.decimals$}"))
        .collect::<Vec<_>>()
        .join("/")
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

fn first_line(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

/// Postfix's smtp-sink, as a child process.
struct Sink {
    port: u16,
    child: std::process::Child,
}

impl Sink {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let mut cmd = Command::new("smtp-sink");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "nobody"]);
        }
        // -m: concurrent sessions; the last argument is the listen backlog.
        cmd.args(["-m", "256", &format!("127.0.0.1:{port}"), "1024"]);
        let child = cmd
            .stdout(std::process::Stdio::null())
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
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// All lock keys of one benchmark run live under this prefix (deleted at the end).
static KEY_PREFIX: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("ir-bench:{}:", uuid::Uuid::new_v4().simple()));

/// Deletes this run's lock and fence keys.
async fn delete_bench_keys() {
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

fn worker_env(db_url: &str, smtp_port: u16) -> Vec<(String, String)> {
    [
        ("INVOICE_REMINDER__DATABASE__URL", db_url.to_owned()),
        ("INVOICE_REMINDER__REDIS__URL", common::redis_url()),
        (
            "INVOICE_REMINDER__LOCK__KEY",
            format!("{}{}:lock", *KEY_PREFIX, uuid::Uuid::new_v4().simple()),
        ),
        ("INVOICE_REMINDER__LOCK__MIN_HOLD", "0s".into()),
        ("INVOICE_REMINDER__SMTP__PORT", smtp_port.to_string()),
        ("INVOICE_REMINDER__SMTP__POOL_SIZE", CONCURRENCY.to_string()),
        (
            "INVOICE_REMINDER__REMINDERS__SEND_CONCURRENCY",
            CONCURRENCY.to_string(),
        ),
        (
            "INVOICE_REMINDER__REMINDERS__BATCH_SIZE",
            BATCH_SIZE.to_string(),
        ),
        ("INVOICE_REMINDER__LOG__LEVEL", "warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn settings(db_url: &str, smtp_port: u16) -> Settings {
    Settings::load(&ConfigSource {
        path: Some(
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.toml"),
        ),
        env: worker_env(db_url, smtp_port),
    })
    .expect("bench settings")
}

async fn reset(pool: &PgPool) {
    sqlx::query(
        "TRUNCATE invoice_reminder.reminders, invoice_reminder.job_runs, invoice_reminder.invoices,
                  invoice_reminder.customers, invoice_reminder.lock_fences RESTART IDENTITY CASCADE",
    )
    .execute(pool)
    .await
    .expect("truncate");
}

async fn reset_reminders(pool: &PgPool) {
    sqlx::query(
        "TRUNCATE invoice_reminder.reminders, invoice_reminder.job_runs, invoice_reminder.lock_fences
         RESTART IDENTITY CASCADE",
    )
        .execute(pool)
        .await
        .expect("truncate reminders");
}

/// `overdue` unpaid invoices due ten days ago, and `paid` paid ones.
async fn seed_overdue(pool: &PgPool, overdue: i64, paid: i64) {
    sqlx::query(
        "INSERT INTO invoice_reminder.customers (name, email)
         SELECT 'Customer ' || g, 'customer' || g || '@example.test' FROM generate_series(1, 1000) g",
    )
    .execute(pool)
    .await
    .expect("customers");
    sqlx::query(
        "INSERT INTO invoice_reminder.invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
         SELECT 1 + g % 1000, 'INV-' || g, 10000 + g % 5000, 'EUR', current_date - 10 - (g % 30)::int,
                CASE WHEN g > $1 THEN now() END
           FROM generate_series(1, $1 + $2) g",
    )
    .bind(overdue)
    .bind(paid)
    .execute(pool)
    .await
    .expect("invoices");
    sqlx::raw_sql("ANALYZE invoice_reminder.invoices; ANALYZE invoice_reminder.customers")
        .execute(pool)
        .await
        .expect("analyze");
}

/// Runs the real binary once over the backlog; returns (reminders/s from
/// the run's own timing, peak RSS in KiB).
async fn end_to_end(db_url: &str, smtp_port: u16, expected: usize) -> (f64, i64) {
    end_to_end_with(db_url, smtp_port, expected, &[]).await
}

/// [`end_to_end`] with extra settings (`("source.relation", ...)`).
async fn end_to_end_with(
    db_url: &str,
    smtp_port: u16,
    expected: usize,
    extra: &[(&str, String)],
) -> (f64, i64) {
    let mut env = worker_env(db_url, smtp_port);
    env.extend(extra.iter().map(|(key, value)| {
        (
            format!(
                "INVOICE_REMINDER__{}",
                key.to_uppercase().replace('.', "__")
            ),
            value.clone(),
        )
    }));
    let (status, rss) = reap(spawn_child(env));
    assert!(status == 0, "run-once failed with {status}");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db_url)
        .await
        .expect("connect");
    let (sent, secs): (i32, f64) = sqlx::query_as(
        "SELECT sent, extract(epoch FROM finished_at - started_at)::float8
           FROM invoice_reminder.job_runs ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .expect("read the run");
    assert_eq!(
        sent as usize, expected,
        "the run did not send the whole backlog"
    );
    (f64::from(sent) / secs, rss)
}

/// Spawns `run-once` and reaps it: (exit code, peak RSS in KiB).
fn run_child(db_url: &str, smtp_port: u16) -> (i32, i64) {
    reap(spawn_child(worker_env(db_url, smtp_port)))
}

fn spawn_child(env: Vec<(String, String)>) -> std::process::Child {
    Command::new(binary())
        .arg("--config")
        .arg(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.toml"))
        .arg("run-once")
        .envs(env)
        .spawn()
        .expect("start invoice-reminder")
}

/// Waits for the child; returns (exit code, peak RSS in KiB).
fn reap(child: std::process::Child) -> (i32, i64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // Peak RSS is the child's `VmHWM`, read every 20 ms until it exits (the
    // mark only grows, so at most the last 20 ms are missed), not wait4's
    // `ru_maxrss`: Linux folds the pre-exec address space's high-water mark
    // into that, and a spawned child's pre-exec space is this process's, so
    // every run after the benchmark had loaded 100k rows for smtp-only
    // reported this process's 56 MiB as the worker's.
    let mut peak_kib = 0;
    loop {
        peak_kib = peak_kib.max(vm_hwm_kib(pid).unwrap_or(0));
        // SAFETY: pid is our child; status is a plain int wait4 fills in.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, std::ptr::null_mut()) };
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
    (code, peak_kib)
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

/// A view over a UUID-keyed billing table (the tests' example schema, with
/// the README's index) holding `open` open invoices among `paid` paid ones:
/// (end-to-end reminders/s, tick ms, one scan ms).
async fn uuid_source_case(
    db_url: &str,
    smtp_port: u16,
    pool: &PgPool,
    open: i64,
    paid: i64,
) -> (f64, f64, f64) {
    sqlx::raw_sql("DROP SCHEMA IF EXISTS billing CASCADE")
        .execute(pool)
        .await
        .expect("drop billing");
    sqlx::raw_sql(common::billing::UUID_SCHEMA)
        .execute(pool)
        .await
        .expect("billing schema");
    sqlx::query(
        "INSERT INTO billing.accounts (name, email)
         SELECT 'Account ' || g, 'account' || g || '@example.test' FROM generate_series(1, 1000) g",
    )
    .execute(pool)
    .await
    .expect("accounts");
    sqlx::query(
        "WITH a AS (SELECT id, (row_number() OVER ()) - 1 AS n FROM billing.accounts)
         INSERT INTO billing.invoices (account_id, ref, total, currency, due_on, status)
         SELECT a.id, 'B-' || g, (100 + g % 5000) / 100.0, 'EUR', current_date - 10 - (g % 30)::int,
                CASE WHEN g <= $1 THEN 'open' ELSE 'paid' END
           FROM generate_series(1, $1 + $2) g JOIN a ON a.n = g % 1000",
    )
    .bind(open)
    .bind(paid)
    .execute(pool)
    .await
    .expect("billing invoices");
    sqlx::raw_sql("ANALYZE billing.invoices; ANALYZE billing.accounts")
        .execute(pool)
        .await
        .expect("analyze");
    let relation = ("source.relation", "billing.reminder_invoices".to_owned());
    let mut settings = settings(db_url, smtp_port);
    settings.source.relation =
        invoice_reminder::config::RelationName::parse(&relation.1).expect("relation");
    let db = Db::new(pool.clone(), &settings);
    db::source::check(&db).await.expect("the billing view");
    let today = db::today(&db, settings.schedule.timezone)
        .await
        .expect("today");
    let owed = owed(&settings, today);
    let started = Instant::now();
    for window in settings.reminders.stages.windows(today) {
        let mut after = None;
        while let Some(last) = db::invoices::fetch_owed_page(&db, &window, owed, after, BATCH_SIZE)
            .await
            .expect("page")
            .last
        {
            after = Some(last);
        }
    }
    let scan_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (rate, _) = end_to_end_with(db_url, smtp_port, open as usize, &[relation]).await;
    let tick_ms = open as f64 / rate * 1000.0;
    sqlx::raw_sql("DROP SCHEMA billing CASCADE")
        .execute(pool)
        .await
        .expect("drop billing");
    (rate, tick_ms, scan_ms)
}

/// The same backlog of `size`, worked direct and through a PgBouncer in
/// transaction mode: (direct reminders/s, pooled reminders/s).
async fn pooler_case(db_url: &str, smtp_port: u16, pool: &PgPool, size: i64) -> (f64, f64) {
    seed_overdue(pool, size, 0).await;
    let (direct, _) = end_to_end(db_url, smtp_port, size as usize).await;
    reset_reminders(pool).await;
    let bouncer = common::pgbouncer::PgBouncer::start(None).await;
    let (pooled, _) = end_to_end_with(
        db_url,
        smtp_port,
        size as usize,
        &[
            ("database.url", bouncer.url(db_url)),
            ("database.pooler", "transaction".to_owned()),
        ],
    )
    .await;
    (direct, pooled)
}

/// A 100k tick whose lock is stolen once 20k reminders are recorded: how
/// long until it stopped, and how many were recorded after the theft.
async fn lock_loss_under_load(db_url: &str, smtp_port: u16, pool: &PgPool) -> (f64, i64, String) {
    let mut env = worker_env(db_url, smtp_port);
    let key = env
        .iter()
        .find(|(k, _)| k == "INVOICE_REMINDER__LOCK__KEY")
        .map(|(_, v)| v.clone())
        .expect("lock key");
    env.push(("INVOICE_REMINDER__LOCK__TTL".into(), "10s".into()));
    env.push(("INVOICE_REMINDER__LOCK__RENEW_EVERY".into(), "200ms".into()));
    let child = spawn_child(env);
    let sent = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM invoice_reminder.reminders WHERE status = 'sent'",
        )
        .fetch_one(pool)
        .await
        .expect("count")
    };
    while sent().await < 20_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut redis = redis::Client::open(common::redis_url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("thief")
        .query_async(&mut redis)
        .await
        .expect("SET");
    let (at_theft, stolen_at): (i64, chrono::DateTime<chrono::Utc>) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM invoice_reminder.reminders WHERE status = 'sent'), now()",
    )
    .fetch_one(pool)
    .await
    .expect("theft time");
    let _ = tokio::task::spawn_blocking(move || reap(child)).await;
    let (total, stopped_ms, outcome): (i32, f64, Option<String>) = sqlx::query_as(
        "SELECT sent, extract(epoch FROM finished_at - $1)::float8 * 1000, outcome
           FROM invoice_reminder.job_runs ORDER BY id DESC LIMIT 1",
    )
    .bind(stolen_at)
    .fetch_one(pool)
    .await
    .expect("run");
    (
        stopped_ms,
        i64::from(total) - at_theft,
        outcome.unwrap_or_default(),
    )
}

/// What a straightforward implementation does: per invoice, one INSERT,
/// one fresh SMTP connection, one UPDATE, one after the other.
async fn naive_loop(pool: &PgPool, settings: &Settings, smtp_port: u16) -> f64 {
    let today = db::today(&Db::plain(pool.clone()), settings.schedule.timezone)
        .await
        .expect("today");
    let rows = overdue_rows(pool, today).await;
    let templates = templates(settings);
    let started = Instant::now();
    for (invoice, customer) in &rows {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO invoice_reminder.reminders (invoice_id, period, status)
             VALUES ($1, 'naive', 'sending') RETURNING id",
        )
        .bind(&invoice.id)
        .fetch_one(pool)
        .await
        .expect("insert");
        let mail = compose(settings, &templates, invoice, customer, today);
        // A fresh connection per message; TCP_NODELAY as the worker uses it,
        // so the comparison is about the design, not a socket option.
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", smtp_port))
            .await
            .expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let mut conn =
            AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &ClientId::default())
                .await
                .expect("greeting");
        conn.send(mail.envelope(), mail.formatted())
            .await
            .expect("send");
        conn.quit().await.expect("quit");
        sqlx::query(
            "UPDATE invoice_reminder.reminders SET status = 'sent', sent_at = now() WHERE id = $1",
        )
        .bind(id)
        .execute(pool)
        .await
        .expect("update");
    }
    rows.len() as f64 / started.elapsed().as_secs_f64()
}

/// Every overdue invoice as the worker would claim it (no claim made).
async fn overdue_rows(pool: &PgPool, today: NaiveDate) -> Vec<(Invoice, Customer)> {
    type Row = (i64, String, i64, String, NaiveDate, String, String);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT i.id, i.number, i.amount_cents, i.currency, i.due_date, c.name, c.email
           FROM invoice_reminder.invoices i JOIN invoice_reminder.customers c ON c.id = i.customer_id
          WHERE i.paid_at IS NULL AND i.due_date < $1 - 3 ORDER BY i.id",
    )
    .bind(today)
    .fetch_all(pool)
    .await
    .expect("overdue rows");
    rows.into_iter()
        .map(
            |(id, number, amount_cents, currency, due_date, name, email)| {
                (
                    Invoice {
                        id: InvoiceId::from(id),
                        number,
                        amount: Amount::Minor(amount_cents),
                        currency,
                        due_date,
                        payment_url: None,
                    },
                    Customer {
                        name,
                        email,
                        locale: None,
                    },
                )
            },
        )
        .collect()
}

/// The worker's database statements alone: page, claim, mark started (as
/// many at a time as sends run at once), record as sent.
async fn db_only(pool: &PgPool, settings: &Settings) -> f64 {
    let db = Db::new(pool.clone(), settings);
    db::source::check(&db).await.expect("source");
    let today = db::today(&db, settings.schedule.timezone)
        .await
        .expect("today");
    let owed = owed(settings, today);
    let run = db::runs::start_run(
        &db,
        db::runs::NewRun {
            replica_id: "bench",
            lock: None,
            period: "db-only",
            lease: None,
        },
    )
    .await
    .expect("run");
    let started = Instant::now();
    let mut total = 0usize;
    for window in settings.reminders.stages.windows(today) {
        let mut after = None;
        loop {
            let page = db::invoices::fetch_owed_page(&db, &window, owed, after, BATCH_SIZE)
                .await
                .expect("page");
            let Some(last) = page.last else {
                break;
            };
            after = Some(last);
            let ids: Vec<InvoiceId> = page.owed.into_iter().filter_map(|k| k.invoice_id).collect();
            let claimed = db::reminders::claim_batch(&db, &ids, &window, owed, run, None)
                .await
                .expect("claim")
                .claimed;
            for chunk in claimed.chunks(CONCURRENCY as usize) {
                let ids: Vec<ReminderId> = chunk.iter().map(|c| c.id).collect();
                db::deliveries::mark_started(&db, run, &ids)
                    .await
                    .expect("mark");
            }
            let deliveries: Vec<Attempted> = claimed
                .iter()
                .map(|c| {
                    let invoice = c.source.invoice_id.clone().unwrap_or_default();
                    Attempted {
                        id: c.id,
                        period: c.period.clone(),
                        attempts_before: c.attempts,
                        delivery: Delivery::Sent {
                            message_id: mail::message_id(&invoice, &c.period, "bench.test"),
                        },
                        invoice,
                    }
                })
                .collect();
            db::deliveries::record_deliveries(&db, run, 5, &deliveries)
                .await
                .expect("record");
            total += claimed.len();
        }
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// The worker's mailer alone: same pool size and concurrency, no database.
async fn smtp_only(pool: &PgPool, settings: &Settings, size: usize) -> f64 {
    let today = db::today(&Db::plain(pool.clone()), settings.schedule.timezone)
        .await
        .expect("today");
    let rows = overdue_rows(pool, today).await;
    assert_eq!(rows.len(), size);
    let templates = templates(settings);
    let mailer = Mailer::new(
        &settings.smtp,
        invoice_reminder::metrics::Metrics::default().smtp_duration(),
    );
    let started = Instant::now();
    let sent = futures::stream::iter(rows.iter())
        .map(|(invoice, customer)| {
            let mailer = mailer.clone();
            let templates = &templates;
            async move {
                let mail = compose(settings, templates, invoice, customer, today);
                mailer.send(&mail, &|| true).await.is_ok()
            }
        })
        .buffer_unordered(CONCURRENCY as usize)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(sent, size, "smtp-only sends failed");
    sent as f64 / started.elapsed().as_secs_f64()
}

/// A worker tick over the backlog (ms, from job_runs) and one full walk of
/// the overdue query (ms), on the current data.
async fn tick_and_scan(
    db_url: &str,
    smtp_port: u16,
    pool: &PgPool,
    settings: &Settings,
) -> (f64, f64) {
    let today = db::today(&Db::plain(pool.clone()), settings.schedule.timezone)
        .await
        .expect("today");
    let owed = owed(settings, today);
    let windows = settings.reminders.stages.windows(today);
    // Warm the cache the way a running system would be.
    let _ = db::owed::owed_listing(&Db::plain(pool.clone()), &windows, owed, 0, 1).await;
    let started = Instant::now();
    for window in &windows {
        let mut after = None;
        loop {
            let page = db::invoices::fetch_owed_page(
                &Db::plain(pool.clone()),
                window,
                owed,
                after,
                BATCH_SIZE,
            )
            .await
            .expect("page");
            let Some(last) = page.last else {
                break;
            };
            after = Some(last);
        }
    }
    let scan_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (status, _) = run_child(db_url, smtp_port);
    assert_eq!(status, 0);
    let tick_ms: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM finished_at - started_at)::float8 * 1000
           FROM invoice_reminder.job_runs ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(pool)
    .await
    .expect("run");
    (tick_ms, scan_ms)
}

/// The worker's templates, as `run-once` loads them.
fn templates(settings: &Settings) -> Templates {
    Templates::load(
        &settings.templates,
        &settings.company,
        &settings.reminders.stages,
    )
    .expect("templates")
}

/// What a claim would present as "owing today".
fn owed(settings: &Settings, today: NaiveDate) -> Owed<'static> {
    Owed {
        today,
        timezone: "UTC",
        min_days_between: settings.reminders.min_days_between,
    }
}

/// The message the worker would send for this invoice today (its due step,
/// rendered from the default templates).
fn compose(
    settings: &Settings,
    templates: &Templates,
    invoice: &Invoice,
    customer: &Customer,
    today: NaiveDate,
) -> mail::OutgoingMail {
    let stages = &settings.reminders.stages;
    let step = stages
        .due_step((today - invoice.due_date).num_days())
        .expect("the invoice owes a step");
    mail::compose(
        templates,
        stages,
        &settings.smtp,
        invoice,
        customer,
        step,
        today,
    )
    .expect("message")
}

/// Renders and builds `n` messages on one thread: the cost per message of
/// the templates (HTML and text) and MIME building.
fn rendering_cost(settings: &Settings, n: usize) -> Duration {
    let templates = templates(settings);
    let today = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
    let customer = Customer {
        name: "Customer 7".into(),
        email: "customer7@example.test".into(),
        locale: None,
    };
    let started = Instant::now();
    for i in 0..n {
        let invoice = Invoice {
            id: InvoiceId::from(i as i64),
            number: format!("INV-{i}"),
            amount: Amount::Minor(12_345 + i as i64),
            currency: "EUR".into(),
            due_date: today - chrono::Days::new(10 + (i % 40) as u64),
            payment_url: None,
        };
        std::hint::black_box(compose(settings, &templates, &invoice, &customer, today));
    }
    started.elapsed() / n as u32
}
