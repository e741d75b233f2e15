//! Throughput benchmark: one command, real services, targets against a limit
//! outside our code.
//!
//! ```text
//! cargo bench --bench throughput                       # everything (BENCHMARKS.md)
//! BENCH_SIZES=10000,20000 ...                          # quicker (no 1M tick)
//! BENCH_BASELINE=0ec0ae5 ...                           # A/B against that revision
//! ```
//!
//! Knobs (environment variables):
//! * `BENCH_SIZES` (default `10000,20000,100000`): the backlogs measured in
//!   `BENCH_ROUNDS` interleaved rounds;
//! * `BENCH_ROUNDS` (default 3): rounds per backlog; tables show medians;
//! * `BENCH_ONE_TICK` (default 1000000, or 0 when `BENCH_SIZES` is set;
//!   0 = none): the backlog worked once, in one tick, followed by `audit`
//!   and `check-source`;
//! * `BENCH_SOURCE_MAX` (default 100000): the most messages one
//!   `smtp-source` measurement sends (the whole backlog up to this);
//! * `BENCH_BASELINE` (a git revision, default none): builds it once
//!   (release, in `target/bench-baseline`) and runs it in the same rounds,
//!   on a database of its own, migrated by its own `migrate`;
//! * `BENCH_BINARY` (a path): end-to-end with another build of today's
//!   schema instead of this one;
//! * `BENCH_NAIVE_MAX` (default 10000): the naive loop runs at backlogs up
//!   to this;
//! * `BENCH_DIAG_MAX` (default 100000): db-only and smtp-only run at
//!   backlogs up to this;
//! * `BENCH_EXTRAS` (default 1; 0 = off): the 1k-among-1M index case, the
//!   UUID view, PgBouncer and lock theft;
//! * `BENCH_CUSTOMERS` (default 1; 0 = off): customer mode, 100k invoices
//!   over 20k customers, in `BENCH_ROUNDS` rounds against smtp-source, and
//!   against invoice mode's RSS;
//! * `BENCH_ARCHIVE` (default 1; 0 = off): the archive's bytes per message
//!   after a 10k tick with `archive.store = "database"`;
//! * `BENCH_LETTERS` (default 1; 0 = off): late-payment letters, composed
//!   per second on one core, and a 10k tick of final notices with letters
//!   against smtp-source at their size.
//!
//! Needs PostgreSQL and Redis (the tests' defaults and their
//! `TEST_POSTGRES_URL` / `TEST_REDIS_URL` overrides) and Postfix's
//! `smtp-sink` and `smtp-source` (`apt-get install postfix`, "No
//! configuration"). It creates its databases, prints everything, and drops
//! them.
//!
//! Each round of a backlog, one after the other, against the same
//! `smtp-sink`: the worker's `run-once` (the release binary, as a child
//! process, with `config/default.toml` pointed at the bench database, Redis
//! and the sink, and metrics served on a free port); `smtp-source -s 8`
//! (Postfix's load generator, the SMTP limit: it is not our code); the
//! baseline's `run-once` if `BENCH_BASELINE` is set; then the diagnostics
//! db-only (our statements alone) and smtp-only (our mailer alone). Once per
//! backlog, `smtp-source -d` (connections reused) as a diagnostic. Per
//! worker run it records reminders/s (from its `job_runs` row), peak RSS
//! (`VmHWM`, polled), CPU seconds (`wait4`), and what it cost the database
//! (`pg_stat_database` before and after, flushed).
//!
//! Targets (printed with PASS/FAIL at the end): end-to-end at least 1.0x
//! smtp-source at 20k and 100k (the median of the per-round ratios), at
//! least 0.8x at the one-tick backlog, peak RSS there within 1.5x of 10k,
//! `audit` there within 5 s, 5x the naive loop at 10k, and a 1k tick among
//! 1M paid invoices within 2x of one among 1k.

#[allow(unused_imports)]
#[path = "../../tests/common/mod.rs"]
mod common;

mod archive;
mod baseline;
mod customers;
mod diagnostics;
mod extras;
mod letters;
mod report;
mod seed;
mod sink;
mod worker;

use std::path::PathBuf;

use invoice_reminder::config::{ConfigSource, Settings};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use report::{RoundResult, Row};
use sink::Sink;
use worker::{BenchDb, CommandRun, Worker};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench());
}

/// The knobs, read once.
struct Knobs {
    sizes: Vec<usize>,
    rounds: usize,
    one_tick: usize,
    source_max: usize,
    naive_max: usize,
    diag_max: usize,
    baseline: Option<String>,
    extras: bool,
    customers: bool,
    archive: bool,
    letters: bool,
}

impl Knobs {
    fn read() -> Self {
        Self {
            sizes: env_list("BENCH_SIZES", "10000,20000,100000"),
            rounds: env_number("BENCH_ROUNDS", 3).max(1),
            // A quick run that names its sizes gets no 1M tick unless asked.
            one_tick: env_number(
                "BENCH_ONE_TICK",
                match std::env::var_os("BENCH_SIZES") {
                    Some(_) => 0,
                    None => 1_000_000,
                },
            ),
            source_max: env_number("BENCH_SOURCE_MAX", 100_000).max(1),
            naive_max: env_number("BENCH_NAIVE_MAX", 10_000),
            diag_max: env_number("BENCH_DIAG_MAX", 100_000),
            baseline: std::env::var("BENCH_BASELINE")
                .ok()
                .filter(|s| !s.trim().is_empty()),
            extras: std::env::var("BENCH_EXTRAS").as_deref() != Ok("0"),
            customers: std::env::var("BENCH_CUSTOMERS").as_deref() != Ok("0"),
            archive: std::env::var("BENCH_ARCHIVE").as_deref() != Ok("0"),
            letters: std::env::var("BENCH_LETTERS").as_deref() != Ok("0"),
        }
    }
}

fn env_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect()
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// The repository this benchmark belongs to.
fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Cargo's target directory (where the baseline is built and logs go).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| {
            if p.is_absolute() {
                p
            } else {
                manifest_dir().join(p)
            }
        })
        .unwrap_or_else(|| manifest_dir().join("target"))
}

/// The worker binary the end-to-end cases run; `BENCH_BINARY` names another
/// build.
fn binary() -> PathBuf {
    std::env::var_os("BENCH_BINARY").map_or_else(
        || env!("CARGO_BIN_EXE_invoice-reminder").into(),
        PathBuf::from,
    )
}

/// The settings today's worker loads in the bench (for the diagnostics,
/// which call the library): config/default.toml pointed at the bench.
fn settings(db_url: &str, smtp_port: u16) -> Settings {
    Settings::load(&ConfigSource {
        path: Some(manifest_dir().join("config/default.toml")),
        env: vec![
            (
                "INVOICE_REMINDER__DATABASE__URL".to_owned(),
                db_url.to_owned(),
            ),
            (
                "INVOICE_REMINDER__REDIS__URL".to_owned(),
                common::redis_url(),
            ),
            (
                "INVOICE_REMINDER__SMTP__PORT".to_owned(),
                smtp_port.to_string(),
            ),
        ],
    })
    .expect("bench settings")
}

async fn bench() {
    let knobs = Knobs::read();
    let sink = Sink::start();

    // Today's worker on a fresh database migrated by its own `migrate`.
    let new_db = common::TestDb::create_empty().await;
    let settings = settings(&new_db.url, sink.port);
    // The worker's own connection options (application_name, plan cache
    // mode), for the bench's SQL and the diagnostics.
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(invoice_reminder::db::options::connect_options(&settings))
        .await
        .expect("connect");
    let new = Worker::create(
        "end-to-end",
        binary(),
        manifest_dir().join("config/default.toml"),
        BenchDb::new(new_db, pool.clone()),
    )
    .await;

    let base = match &knobs.baseline {
        Some(rev) => {
            let build = baseline::build(rev);
            let db = common::TestDb::create_empty().await;
            let base_pool = PgPoolOptions::new()
                .max_connections(2)
                .connect(&db.url)
                .await
                .expect("connect baseline database");
            let worker = Worker::create(
                &format!("baseline {}", build.rev),
                build.binary.clone(),
                build.config.clone(),
                BenchDb::new(db, base_pool),
            )
            .await;
            Some((build, worker))
        }
        None => None,
    };

    print_header(&knobs, &pool, &sink, &new, base.as_ref()).await;
    let message = diagnostics::rendering_cost(&settings, 20_000);
    println!(
        "one message (default templates, HTML + text, one thread): {:.1} µs to render and \
         build, {} bytes on average (smtp-source -l {})",
        message.per_message.as_secs_f64() * 1e6,
        message.mean_bytes,
        message.mean_bytes
    );
    println!(
        "SMTP limit: smtp-source -s 8 -m <backlog, at most {}> -l {} against the same sink \
         (8 sessions, a new connection per message); rate = messages / its wall time",
        knobs.source_max, message.mean_bytes
    );
    println!();

    let mut rows: Vec<Row> = Vec::new();
    // (backlog, rounds, whether it is the one-tick backlog)
    let mut plan: Vec<(usize, usize, bool)> = knobs
        .sizes
        .iter()
        .map(|&n| (n, knobs.rounds, false))
        .collect();
    if knobs.one_tick > 0 {
        plan.push((knobs.one_tick, 1, true));
    }
    let mut commands: Vec<CommandRun> = Vec::new();
    for &(size, rounds, one_tick) in &plan {
        println!(
            "backlog {size}: {}",
            if one_tick {
                "one round, one tick".to_owned()
            } else {
                format!("{rounds} interleaved round(s)")
            }
        );
        new.db.reset_all().await;
        seed::seed_overdue(&new.db.pool, &new.db.schema, size as i64, 0).await;
        if let Some((_, b)) = &base {
            b.db.reset_all().await;
            seed::seed_overdue(&b.db.pool, &b.db.schema, size as i64, 0).await;
        }
        let naive = if size <= knobs.naive_max {
            let rate = diagnostics::naive_loop(&pool, &settings, sink.port).await;
            new.db.reset_runs().await;
            println!("  naive loop: {rate:.0}/s");
            Some(rate)
        } else {
            None
        };
        let mut results = Vec::new();
        for round in 1..=rounds {
            let e2e = new.run_once(sink.port, size, &[], true).await;
            let mut ran = Vec::new();
            if one_tick {
                // The operator's commands over the tables a 1M tick leaves.
                for name in ["audit", "check-source"] {
                    ran.push(new.command(name).await);
                }
            }
            new.db.reset_runs().await;
            let source_messages = size.min(knobs.source_max);
            let source = tokio::task::block_in_place(|| {
                sink.smtp_source(source_messages, message.mean_bytes, false)
            });
            let baseline = match &base {
                Some((_, b)) => {
                    let run = b.run_once(sink.port, size, &[], true).await;
                    b.db.reset_runs().await;
                    Some(run)
                }
                None => None,
            };
            let (db_only, smtp_only) = if size <= knobs.diag_max {
                let d = diagnostics::db_only(&pool, &settings).await;
                new.db.reset_runs().await;
                let s = diagnostics::smtp_only(&pool, &settings, size).await;
                (Some(d), Some(s))
            } else {
                (None, None)
            };
            let result = RoundResult {
                e2e,
                source,
                source_messages,
                baseline,
                db_only,
                smtp_only,
            };
            report::print_round(round, &result);
            for run in &ran {
                report::print_command(size, run);
            }
            commands.extend(ran);
            results.push(result);
        }
        // The same, each session over one connection: a diagnostic.
        let messages = size.min(knobs.source_max);
        let source_reused =
            tokio::task::block_in_place(|| sink.smtp_source(messages, message.mean_bytes, true));
        println!(
            "  smtp-source -d (one connection per session): {source_reused:.0}/s ({messages} messages)"
        );
        rows.push(Row {
            size,
            one_tick,
            naive,
            source_reused,
            rounds: results,
        });
        println!();
    }
    // The baseline's database is no longer needed.
    drop(base.map(|(_, w)| w));

    report::print_tables(&rows, knobs.baseline.as_deref());

    let extras = if knobs.extras {
        Some(extras::run_all(&new, &pool, &settings, sink.port).await)
    } else {
        None
    };

    if knobs.archive {
        archive::run(&new, &sink).await;
    }
    if knobs.letters {
        letters::run(&new, &sink, knobs.rounds).await;
    }
    let customer_case = match knobs.customers {
        true => Some(customers::run(&new, &settings, &sink, knobs.rounds).await),
        false => None,
    };

    report::summarize(&rows, &commands, knobs.one_tick, extras.as_ref());
    if let Some(c) = &customer_case {
        let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
        println!(
            "{}  customer mode (100k invoices, 20k customers): statements/s >= 0.8x smtp-source: {:.2}x",
            verdict(c.ratio() >= 0.8),
            c.ratio()
        );
        println!(
            "{}  customer mode peak RSS within 1.5x of invoice mode: {:.2}x",
            verdict(c.rss_ratio() <= 1.5),
            c.rss_ratio()
        );
    }
    worker::delete_bench_keys().await;
    drop(new);
    drop(sink);
}

async fn print_header(
    knobs: &Knobs,
    pool: &PgPool,
    sink: &Sink,
    new: &Worker,
    base: Option<&(baseline::Build, Worker)>,
) {
    println!("invoice-reminder throughput benchmark");
    let server: (String, String, String) = sqlx::query_as(
        "SELECT current_setting('server_version'), current_setting('synchronous_commit'),
                current_setting('autovacuum')",
    )
    .fetch_one(pool)
    .await
    .expect("server settings");
    println!(
        "machine: {} cores, {}; PostgreSQL {} (synchronous_commit {}, autovacuum {}); \
         smtp-sink on 127.0.0.1:{}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        report::first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "cpu unknown".into()),
        server.0,
        server.1,
        server.2,
        sink.port
    );
    println!(
        "worker: {} with {} as it is (batch_size, send_concurrency, smtp.pool_size, stages, \
         templates, started marks, log level: defaults), only database.url, redis.url, \
         lock.key, smtp.port and http.listen (a free port: metrics on) set",
        new.binary.display(),
        new.config.display()
    );
    if let Some((build, _)) = base {
        println!(
            "baseline: {} ({}), built in {}, with its own default.toml and database (tables in \
             {}); the same keys set where it has them",
            build.rev,
            build.sha,
            build.binary.display(),
            base.map(|(_, w)| w.db.schema.as_str()).unwrap_or("?")
        );
    }
    println!(
        "backlogs: {:?} x {} round(s){}; naive up to {}, db-only/smtp-only up to {}",
        knobs.sizes,
        knobs.rounds,
        if knobs.one_tick > 0 {
            format!(", then {} once in one tick", knobs.one_tick)
        } else {
            String::new()
        },
        knobs.naive_max,
        knobs.diag_max
    );
}
