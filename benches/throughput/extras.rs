//! Cases beside the backlog table (`BENCH_EXTRAS`, on by default), each with
//! today's worker and its defaults: whether a tick's cost follows overdue
//! invoices rather than the ledger, a view over a UUID-keyed table,
//! PgBouncer in transaction mode, and a lock stolen under full load.

use std::time::{Duration, Instant};

use invoice_reminder::config::Settings;
use invoice_reminder::db;
use invoice_reminder::db::Db;
use sqlx::PgPool;

use crate::common;
use crate::seed::seed_overdue;
use crate::worker::{Worker, reap};

/// What the extras measured.
pub struct Extras {
    /// 1k overdue among 1k paid: (tick ms, overdue scan ms).
    pub small: (f64, f64),
    /// 1k overdue among 1M paid: (tick ms, overdue scan ms).
    pub large: (f64, f64),
}

/// Runs every extra case on today's worker's database and prints them.
pub async fn run_all(new: &Worker, pool: &PgPool, settings: &Settings, smtp_port: u16) -> Extras {
    let schema = new.db.schema.as_str();
    // The overdue index: cost should follow overdue invoices, not the ledger.
    new.db.reset_all().await;
    seed_overdue(pool, schema, 1000, 1000).await;
    let small = tick_and_scan(new, smtp_port, pool, settings, 1000).await;
    new.db.reset_all().await;
    seed_overdue(pool, schema, 1000, 1_000_000).await;
    let large = tick_and_scan(new, smtp_port, pool, settings, 1000).await;

    // The source as a team has it: a view over a UUID-keyed table.
    new.db.reset_all().await;
    let uuid = uuid_source_case(new, smtp_port, pool, settings, 10_000, 990_000).await;

    // The same 10k backlog direct and through PgBouncer (transaction mode).
    new.db.reset_all().await;
    let (direct, pooled) = pooler_case(new, smtp_port, pool, 10_000).await;

    // Cancellation under full load.
    new.db.reset_all().await;
    seed_overdue(pool, schema, 100_000, 0).await;
    let (stopped_ms, after, outcome) = lock_loss_under_load(new, smtp_port, pool).await;

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
    Extras { small, large }
}

/// A worker tick over the backlog (ms, from job_runs) and one full walk of
/// the overdue query (ms), on the current data.
async fn tick_and_scan(
    new: &Worker,
    smtp_port: u16,
    pool: &PgPool,
    settings: &Settings,
    expected: usize,
) -> (f64, f64) {
    let scan_ms = scan(pool, settings).await;
    let run = new.run_once(smtp_port, expected, &[], false).await;
    (run.secs * 1000.0, scan_ms)
}

/// One walk of the overdue query over every window of `settings`'s source,
/// page by page (ms), after an untimed walk that warms the cache the way a
/// running system would have it.
async fn scan(pool: &PgPool, settings: &Settings) -> f64 {
    let db = Db::new(pool.clone(), settings);
    db::source::check(&db).await.expect("the source");
    let today = db::today(&db, settings.schedule.timezone)
        .await
        .expect("today");
    let owed = crate::diagnostics::owed(settings, today);
    let windows = settings.reminders.stages.windows(today);
    let walk = || async {
        let started = Instant::now();
        for window in &windows {
            let mut after = None;
            while let Some(last) = db::invoices::fetch_owed_page(
                &db,
                window,
                &owed,
                after,
                settings.reminders.batch_size,
            )
            .await
            .expect("page")
            .last
            {
                after = Some(last);
            }
        }
        started.elapsed().as_secs_f64() * 1000.0
    };
    walk().await;
    walk().await
}

/// A view over a UUID-keyed billing table (the tests' example schema, with
/// the README's index) holding `open` open invoices among `paid` paid ones:
/// (end-to-end reminders/s, tick ms, one scan ms).
async fn uuid_source_case(
    new: &Worker,
    smtp_port: u16,
    pool: &PgPool,
    settings: &Settings,
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
    let mut settings = settings.clone();
    settings.source.relation =
        invoice_reminder::config::RelationName::parse(&relation.1).expect("relation");
    let scan_ms = scan(pool, &settings).await;
    let run = new
        .run_once(smtp_port, open as usize, &[relation], false)
        .await;
    sqlx::raw_sql("DROP SCHEMA billing CASCADE")
        .execute(pool)
        .await
        .expect("drop billing");
    (run.rate, run.secs * 1000.0, scan_ms)
}

/// The same backlog of `size`, worked direct and through a PgBouncer in
/// transaction mode: (direct reminders/s, pooled reminders/s).
async fn pooler_case(new: &Worker, smtp_port: u16, pool: &PgPool, size: i64) -> (f64, f64) {
    seed_overdue(pool, &new.db.schema, size, 0).await;
    let direct = new.run_once(smtp_port, size as usize, &[], false).await;
    new.db.reset_runs().await;
    let bouncer = common::pgbouncer::PgBouncer::start(None).await;
    let pooled = new
        .run_once(
            smtp_port,
            size as usize,
            &[
                ("database.url", bouncer.url(&new.db.url)),
                ("database.pooler", "transaction".to_owned()),
            ],
            false,
        )
        .await;
    (direct.rate, pooled.rate)
}

/// A 100k tick whose lock is stolen once 20k reminders are recorded: how
/// long until it stopped, and how many were recorded after the theft.
async fn lock_loss_under_load(new: &Worker, smtp_port: u16, pool: &PgPool) -> (f64, i64, String) {
    let env = new.env(
        smtp_port,
        &[
            ("lock.ttl", "10s".into()),
            ("lock.renew_every", "200ms".into()),
        ],
    );
    let key = env
        .iter()
        .find(|(k, _)| k == "INVOICE_REMINDER__LOCK__KEY")
        .map(|(_, v)| v.clone())
        .expect("lock key");
    let child = new.spawn_run_once(env);
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
