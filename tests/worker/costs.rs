//! What a tick costs the database, guarded without timings, as PostgreSQL
//! itself counts it: rows read per reminder (`seq_tup_read` of every table
//! and `idx_tup_read` of every index, `pg_stat_user_tables` and
//! `pg_stat_user_indexes`), transactions per 1,000 reminders and rows
//! written per reminder (`pg_stat_database`), each read once every session
//! of the tick has ended. Each mode works one tick at two sizes, 2,000 and
//! 20,000 owed, on a `reminders` table that is empty and analyzed as empty
//! when the tick starts and holds 20,000 rows when it ends: the planner's
//! statistics are as stale as they get within one tick. And `reminders`
//! carries, besides its own indexes, indexes an operator might add for
//! reports of their own ([`BAIT_INDEXES`]): a lookup must read what its
//! own index finds, whatever else is there.
//!
//! Rows read per reminder must not grow with the backlog: a per-row lookup
//! that reads every reminder sent today (a bitmap of another index beside
//! the one the lookup means) reads ten times more per reminder at 20,000
//! than at 2,000, and fails here whatever the machine's speed.
//!
//! Transactions per 1,000 reminders are counted net of what a tick costs
//! whatever its size (the source check, the fencing floor, the clock, the
//! run's start and end, tidying, the hand-back, each statement prepared
//! once on each connection: about 50): the growth in commits from the
//! smaller tick to the larger, per 1,000 more reminders. By design
//! (BENCHMARKS.md, "The in-flight limit"), in invoice mode: a page read and
//! claimed (with its suppression lookup) in one transaction per
//! `batch_size` (500) rows, 2; a mark per group of 48 letters (the window
//! of `send_concurrency` 64 less two per connection of `smtp.pool_size`
//! 8), 21; the results written in those marks' commits: 23 in all, bound
//! 25. In customer mode (five invoices a statement): a page read with its
//! suppression lookup and a claim per 500 rows, 4; a mark per 48
//! statements, about 4: 8 per 1,000 reminders (about 43 per 1,000
//! statements), bound 10. A commit per message adds 1,000 and fails here.
//! Left out: the reads of the payment holds for letters that waited more
//! than a quarter of a second after their mark (`tick::last_check`), a
//! statement each, which the tick's summary counts (`hold_reads`): how
//! many follows the machine's pace (none when letters go at once; a few
//! hundred on a loaded machine), not the design, and this guard must
//! not depend on timing.
//!
//! Rows written per reminder: its claim (insert), its started mark and its
//! result (updates): 3, plus the run's own rows.

use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

/// The smaller and the larger backlog of each mode.
const SMALL: i64 = 2_000;
const LARGE: i64 = 20_000;

/// Rows read per reminder may grow by this much from the smaller backlog
/// to the larger: per-tick costs spread over more reminders shrink it.
const GROWTH: f64 = 1.3;

/// Indexes on `reminders` that a lookup must never combine with the one
/// it means: each holds a set that grows with every reminder sent (every
/// `sent` row, every row of a day, every status), so a bitmap AND with
/// any of them reads that set again for every row. An operator may add
/// any of these for reports of their own.
const BAIT_INDEXES: &str = "
    CREATE INDEX bait_status ON reminders (status);
    CREATE INDEX bait_sent_at ON reminders (sent_at);
    CREATE INDEX bait_claimed_status ON reminders (claimed_at, status);
    CREATE INDEX bait_sent_messages ON reminders (message_id) WHERE status = 'sent';
    CREATE INDEX bait_continued ON reminders (continued) WHERE NOT continued;";

/// What PostgreSQL has counted for one database so far.
#[derive(Debug, Clone, Default)]
struct DbStats {
    commits: i64,
    rows_written: i64,
    /// Rows read, by table (`seq_tup_read`) and index (`idx_tup_read`).
    rows_read: std::collections::BTreeMap<String, i64>,
}

impl DbStats {
    fn rows_read(&self) -> i64 {
        self.rows_read.values().sum()
    }
}

/// What one tick cost, per reminder (rows) and in all (transactions).
#[derive(Debug, Clone)]
struct TickCost {
    reminders: f64,
    rows_read: f64,
    commits: f64,
    rows_written: f64,
    /// Rows read per reminder by table and index, most first: where a
    /// failure looks first.
    by_relation: Vec<(String, f64)>,
}

impl TickCost {
    /// The relations read most, per reminder.
    fn describe(&self) -> String {
        self.by_relation
            .iter()
            .take(6)
            .map(|(name, n)| format!("{name} {n:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Waits until no session is connected to `database`: a session's counts
/// reach the statistics when it ends.
async fn wait_for_no_sessions(admin: &sqlx::PgPool, database: &str) {
    common::wait_until(
        "every session of the test database has ended",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(database)
                .fetch_one(admin)
                .await
                .unwrap()
                == 0
        },
    )
    .await;
}

/// The counters of `world`'s database once no session is connected to it.
/// Transactions are read from another database (so reading adds none);
/// rows read, which only a session of the database itself can see, are
/// read first, by a session that ends before the transactions are read.
async fn db_stats(world: &World) -> DbStats {
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&common::postgres_admin_url())
        .await
        .unwrap();
    wait_for_no_sessions(&admin, &world.db.name).await;
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect(&world.db.url)
        .await
        .unwrap();
    let rows_read: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname || ' (scans)', COALESCE(seq_tup_read, 0) FROM pg_stat_user_tables
          UNION ALL
         SELECT indexrelname, COALESCE(idx_tup_read, 0) FROM pg_stat_user_indexes",
    )
    .fetch_all(&own)
    .await
    .unwrap();
    own.close().await;
    wait_for_no_sessions(&admin, &world.db.name).await;
    let (commits, rows_written): (i64, i64) = sqlx::query_as(
        "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted
           FROM pg_stat_database WHERE datname = $1",
    )
    .bind(&world.db.name)
    .fetch_one(&admin)
    .await
    .unwrap();
    admin.close().await;
    DbStats {
        commits,
        rows_written,
        rows_read: rows_read.into_iter().collect(),
    }
}

/// `invoices` overdue invoices, `per_customer` to a customer.
async fn insert_backlog(world: &World, invoices: i64, per_customer: i64) {
    sqlx::query(
        "WITH c AS (
             INSERT INTO customers (name, email)
             SELECT 'Customer ' || g, 'customer' || g || '@example.test'
               FROM generate_series(1, $1::bigint / $2::bigint) g
             RETURNING id
         )
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT c.id, 'INV-' || c.id || '-' || n, 12345, 'EUR', current_date - 10
           FROM c CROSS JOIN generate_series(1, $2::bigint) n",
    )
    .bind(invoices)
    .bind(per_customer)
    .execute(world.pool())
    .await
    .unwrap();
}

/// One tick on `world` after `VACUUM ANALYZE`, once the test's own
/// sessions have ended: its summary, and the counters before and after.
async fn counted_tick(world: &World) -> (invoice_reminder::tick::Summary, DbStats, DbStats) {
    sqlx::query("VACUUM ANALYZE")
        .execute(world.pool())
        .await
        .unwrap();
    world.pool().close().await;
    let before = db_stats(world).await;
    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    ctx.close_database().await;
    let after = db_stats(world).await;
    let TickOutcome::Done(summary) = outcome else {
        panic!("expected Done, got {outcome:?}");
    };
    (summary, before, after)
}

/// Twenty zones from UTC-10 to UTC+14, the customers' by turns.
const ZONES: [&str; 20] = [
    "Pacific/Honolulu",
    "America/Anchorage",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "Atlantic/Azores",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Helsinki",
    "Europe/Moscow",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Bangkok",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
    "Pacific/Kiritimati",
];

/// Spreads the customers over [`ZONES`] and two holiday calendars, and
/// moves the database clock to noon UTC of the first day from today on
/// that is no holiday of either on any of the dates it is somewhere.
async fn spread_over_zones(world: &World) {
    sqlx::query(
        "UPDATE customers SET timezone = ($1::text[])[1 + id % 20],
                holiday_calendar = CASE WHEN id % 2 = 0 THEN 'DE-BY' ELSE 'US' END",
    )
    .bind(ZONES)
    .execute(world.pool())
    .await
    .unwrap();
    let calendars =
        ["DE-BY", "US"].map(|c| invoice_reminder::domain::Holidays::built_in(c).unwrap());
    let today = chrono::Utc::now().date_naive();
    let day = today
        .iter_days()
        .find(|d| {
            [d.pred_opt(), Some(*d), d.succ_opt()]
                .into_iter()
                .flatten()
                .all(|x| calendars.iter().all(|c| !c.contains(x)))
        })
        .unwrap();
    common::clock_at(world, &format!("{day}T12:00:00Z")).await;
}

/// One tick over `invoices` owed invoices (`per_customer` to a customer)
/// with the default settings but `overrides`, and what it cost. The tick
/// starts on an empty `reminders` table whose statistics say so, with
/// autovacuum off (its work is counted in the same place, and an analyze
/// half-way would hide what stale statistics do).
async fn tick_cost(invoices: i64, per_customer: i64, overrides: &[(&str, &str)]) -> TickCost {
    tick_cost_in(invoices, per_customer, overrides, false).await
}

/// [`tick_cost`], the customers spread over [`ZONES`] and two calendars
/// when `zones`.
async fn tick_cost_in(
    invoices: i64,
    per_customer: i64,
    overrides: &[(&str, &str)],
    zones: bool,
) -> TickCost {
    let mut world = World::new().await;
    // The default lease timing (the tests' 500 ms renewals would add a
    // lease extension per half second: a count that grows with a slow
    // machine, not with the design).
    world.set("lock.ttl", "30s").set("lock.renew_every", "10s");
    for (key, value) in overrides {
        world.set(key, value);
    }
    insert_backlog(&world, invoices, per_customer).await;
    if zones {
        spread_over_zones(&world).await;
    }
    sqlx::raw_sql(BAIT_INDEXES)
        .execute(world.pool())
        .await
        .unwrap();
    sqlx::raw_sql(
        "ALTER TABLE customers SET (autovacuum_enabled = false);
         ALTER TABLE invoices SET (autovacuum_enabled = false);
         ALTER TABLE reminders SET (autovacuum_enabled = false);
         ALTER TABLE job_runs SET (autovacuum_enabled = false);",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let (summary, before, after) = counted_tick(&world).await;
    let reminders = f64::from(summary.counts.sent);
    assert_eq!(
        i64::from(summary.counts.sent),
        invoices,
        "every owed invoice was reminded"
    );
    let mut by_relation: Vec<(String, f64)> = after
        .rows_read
        .iter()
        .map(|(name, n)| {
            let was = before.rows_read.get(name).copied().unwrap_or(0);
            (name.clone(), (n - was) as f64 / reminders)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    by_relation.sort_by(|a, b| b.1.total_cmp(&a.1));
    let cost = TickCost {
        reminders,
        rows_read: (after.rows_read() - before.rows_read()) as f64 / reminders,
        // Net of the pace's hold reads (see the module doc).
        commits: (after.commits - before.commits) as f64 - summary.hold_reads as f64,
        rows_written: (after.rows_written - before.rows_written) as f64 / reminders,
        by_relation,
    };
    println!(
        "{invoices} owed, {per_customer} per customer: {:.1} rows read per reminder ({}), {} transactions besides {} hold reads, {:.3} rows written per reminder",
        cost.rows_read,
        cost.describe(),
        cost.commits,
        summary.hold_reads,
        cost.rows_written
    );
    cost
}

/// Asserts the costs of one mode: rows read per reminder flat from the
/// smaller backlog to the larger and, at the larger, at most
/// `max_rows_read`; transactions per 1,000 more reminders at most
/// `max_commits`; 3 rows written per reminder at both.
fn assert_linear(small: TickCost, large: TickCost, max_rows_read: f64, max_commits: f64) {
    assert!(
        large.rows_read <= small.rows_read * GROWTH,
        "rows read per reminder grew with the backlog: {:.1} at {SMALL} owed ({}), {:.1} at {LARGE} ({}) (at most {GROWTH}x)",
        small.rows_read,
        small.describe(),
        large.rows_read,
        large.describe()
    );
    assert!(
        large.rows_read <= max_rows_read,
        "{:.1} rows read per reminder at {LARGE} owed ({}; bound {max_rows_read})",
        large.rows_read,
        large.describe()
    );
    for (owed, cost) in [(SMALL, &small), (LARGE, &large)] {
        assert!(
            cost.rows_written <= 3.05,
            "{:.3} rows written per reminder at {owed} owed (the design writes 3)",
            cost.rows_written
        );
    }
    let per_1000 = (large.commits - small.commits) * 1_000.0 / (large.reminders - small.reminders);
    println!("{per_1000:.1} transactions per 1,000 more reminders");
    assert!(
        per_1000 <= max_commits,
        "{per_1000:.1} transactions per 1,000 more reminders ({} at {SMALL} owed, {} at {LARGE}; bound {max_commits}; see the module doc)",
        small.commits,
        large.commits
    );
}

#[tokio::test]
async fn in_invoice_mode_a_ticks_cost_per_reminder_does_not_grow_with_the_backlog() {
    let small = tick_cost(SMALL, 1, &[]).await;
    let large = tick_cost(LARGE, 1, &[]).await;
    // edab793 read 24.3 rows per reminder at 20,000.
    assert_linear(small, large, 12.0, 25.0);
}

#[tokio::test]
async fn in_customer_mode_a_ticks_cost_per_reminder_does_not_grow_with_the_backlog() {
    let mode = [("reminders.group_by", "customer")];
    let small = tick_cost(SMALL, 5, &mode).await;
    let large = tick_cost(LARGE, 5, &mode).await;
    // edab793 read 14.5 rows per reminder at 20,000.
    assert_linear(small, large, 14.5, 10.0);
}

#[tokio::test]
async fn with_customers_in_twenty_zones_and_two_calendars_a_ticks_cost_per_reminder_does_not_grow_with_the_backlog()
 {
    // Weekdays 09:00-17:00 would leave most zones closed at noon UTC: the
    // window is every day, all day, and each row's date and calendar are
    // still its own.
    let small = tick_cost_in(SMALL, 1, &[], true).await;
    let large = tick_cost_in(LARGE, 1, &[], true).await;
    assert_linear(small, large, 12.0, 25.0);
}

/// `reltuples` of the reminders table: what the planner believes it holds
/// (-1 until it was first counted).
async fn planner_rows(world: &World) -> f32 {
    sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE oid = 'reminders'::regclass")
        .fetch_one(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_big_tick_refreshes_the_planners_statistics_and_a_small_one_does_not() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 200).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let after_the_backlog = planner_rows(&world).await;
    common::insert_overdue(world.pool(), 10).await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let after_a_small_tick = planner_rows(&world).await;

    assert_eq!(common::count_status(world.pool(), "sent").await, 210);
    assert_eq!(
        after_the_backlog, 200.0,
        "200 claimed into an empty table: ANALYZE ran"
    );
    assert_eq!(
        after_a_small_tick, 200.0,
        "10 claimed into 200 rows is under 50 + 10 %: no ANALYZE"
    );
}

#[tokio::test]
async fn holds_read_again_for_letters_that_waited_find_their_rows_by_key_not_by_scanning_reminders()
{
    // The relay greets a second late: the first letters marked wait for
    // it longer than a quarter of a second, so their holds are read again
    // before each goes, while `reminders` is analyzed as empty.
    let relay = crate::common::relay::Relay::start(crate::common::relay::RelayOptions {
        hold_greeting: Some(Duration::from_secs(1)),
        ..Default::default()
    })
    .await;
    let mut world = World::new().await;
    world.set("smtp.port", relay.port);
    common::insert_overdue(world.pool(), 300).await;
    let (summary, before, after) = counted_tick(&world).await;
    assert_eq!(summary.counts.sent, 300);
    assert!(summary.hold_reads > 0, "{summary:?}");
    let scanned = |s: &DbStats| s.rows_read.get("reminders (scans)").copied().unwrap_or(0);
    assert_eq!(
        scanned(&after) - scanned(&before),
        0,
        "{} hold reads scanned reminders",
        summary.hold_reads
    );
}

/// `audit` over `owed` owed invoices (five to a customer, the customers
/// spread over [`ZONES`] and two calendars), none reminded yet: rows read
/// per owed invoice, by relation.
async fn audit_cost(owed: i64) -> (f64, String) {
    let world = World::new().await;
    insert_backlog(&world, owed, 5).await;
    spread_over_zones(&world).await;
    sqlx::query("VACUUM ANALYZE")
        .execute(world.pool())
        .await
        .unwrap();
    world.pool().close().await;
    let before = db_stats(&world).await;
    let out = common::cli(&world, &["audit", "--json"]).await;
    let after = db_stats(&world).await;
    let json: serde_json::Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    assert_eq!(
        json["missing_count"].as_i64(),
        Some(owed),
        "{}",
        common::stdout(&out)
    );
    let mut by_relation: Vec<(String, i64)> = after
        .rows_read
        .iter()
        .map(|(name, n)| {
            (
                name.clone(),
                n - before.rows_read.get(name).copied().unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    by_relation.sort_by_key(|r| std::cmp::Reverse(r.1));
    let read = (after.rows_read() - before.rows_read()) as f64 / owed as f64;
    let described = by_relation
        .iter()
        .take(6)
        .map(|(name, n)| format!("{name} {:.1}", *n as f64 / owed as f64))
        .collect::<Vec<_>>()
        .join(", ");
    println!("audit over {owed} owed: {read:.1} rows read per owed invoice ({described})");
    (read, described)
}

/// The survey of what is owed (`audit`, `check-source`, `run-once
/// --dry-run`, the console's overview) walks the source once per step,
/// however many local dates are today somewhere: about one row read per
/// owed invoice, plus two for each one listed (its count of source rows,
/// at most 10,000). Joined to each date's windows it read 6.2 per owed
/// invoice at 20,000 (the planner drove it from the customers, five
/// invoices read for each one owed), and worked out each row's own date
/// once per window.
#[tokio::test]
async fn the_survey_of_what_is_owed_reads_each_owed_invoice_once_with_customers_in_twenty_zones() {
    let (small, small_read) = audit_cost(SMALL).await;
    let (large, large_read) = audit_cost(LARGE).await;
    assert!(
        large <= small * GROWTH,
        "rows read per owed invoice grew with the backlog: {small:.1} at {SMALL} ({small_read}), {large:.1} at {LARGE} ({large_read})"
    );
    assert!(
        large <= 3.0,
        "{large:.1} rows read per owed invoice at {LARGE} ({large_read}; bound 3)"
    );
}
