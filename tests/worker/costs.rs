//! What a tick costs the database, guarded without timings: transactions
//! per 1,000 reminders and rows written per reminder, as PostgreSQL itself
//! counts them (`pg_stat_database`), over a tick of 2,000 owed reminders
//! with the default settings (`batch_size` 500, `send_concurrency` 64).
//!
//! The design's arithmetic, per 1,000 reminders:
//! * pages: 1,000 / 500 = 2 (plus one empty page per step, per tick);
//! * claims: 1,000 / 500 = 2 transactions;
//! * started marks: one per group of half the mark window,
//!   `send_concurrency / 2` = 32 rows: 31;
//! * results: one statement per half batch (250 rows): 4;
//! * suppression lookups: one per claimed batch: 2;
//! * per tick, whatever its size: the source check, the fencing floor, the
//!   clock, the run's start and end, retiring, returning, the rows without
//!   a key, the retry claim, the empty pages of the other steps, the
//!   hand-back, lease extensions, and (the tick claimed more than a tenth
//!   of the table) the statistics refresh (~22 in all: 11 per 1,000 at
//!   this size);
//! * a fresh process prepares each statement once on each pooled
//!   connection it uses, a transaction each (~10 per 1,000 at this size;
//!   nothing once a `run` process has warmed up).
//!
//! About 63 in all; the bound is 80. A commit per message (a mark, a
//! result or a claim per row) adds 1,000 and fails this test.
//!
//! Rows written per reminder: its claim (insert), its started mark and its
//! result (updates): 3, plus the run's own rows.

use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

/// What PostgreSQL has counted for one database so far.
#[derive(Debug, Clone, Copy)]
struct DbStats {
    commits: i64,
    rows_written: i64,
}

/// The counters of `database`, read from another database (so the reading
/// adds nothing) once no session is connected to it: a session's counts
/// reach `pg_stat_database` when it ends.
async fn db_stats(database: &str) -> DbStats {
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&common::postgres_admin_url())
        .await
        .unwrap();
    common::wait_until(
        "every session of the test database has ended",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
                .bind(database)
                .fetch_one(&admin)
                .await
                .unwrap()
                == 0
        },
    )
    .await;
    let (commits, rows_written): (i64, i64) = sqlx::query_as(
        "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted
           FROM pg_stat_database WHERE datname = $1",
    )
    .bind(database)
    .fetch_one(&admin)
    .await
    .unwrap();
    admin.close().await;
    DbStats {
        commits,
        rows_written,
    }
}

#[tokio::test]
async fn a_tick_costs_at_most_80_transactions_per_1000_reminders_and_3_rows_written_each() {
    let mut world = World::new().await;
    // The default lease timing (the tests' 500 ms renewals would add a
    // lease extension per half second: a count that grows with a slow
    // machine, not with the design).
    world.set("lock.ttl", "30s").set("lock.renew_every", "10s");
    common::insert_overdue(world.pool(), 2_000).await;
    // Autovacuum's transactions are counted in the same place, and 2,000
    // new rows invite it: it is not the worker's cost.
    sqlx::raw_sql(
        "ALTER TABLE customers SET (autovacuum_enabled = false);
         ALTER TABLE invoices SET (autovacuum_enabled = false);
         ALTER TABLE reminders SET (autovacuum_enabled = false);
         ALTER TABLE job_runs SET (autovacuum_enabled = false);",
    )
    .execute(world.pool())
    .await
    .unwrap();
    // The test's own sessions end before counting starts.
    world.pool().close().await;
    let before = db_stats(&world.db.name).await;

    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    ctx.close_database().await;
    let after = db_stats(&world.db.name).await;

    let TickOutcome::Done(summary) = outcome else {
        panic!("expected Done, got {outcome:?}");
    };
    assert_eq!(summary.counts.sent, 2_000);
    let commits = after.commits - before.commits;
    let per_1000 = commits as f64 / 2.0;
    let rows_per_reminder = (after.rows_written - before.rows_written) as f64 / 2_000.0;
    println!(
        "{commits} transactions ({per_1000:.1} per 1,000 reminders), {rows_per_reminder:.3} rows written per reminder"
    );
    assert!(
        per_1000 <= 80.0,
        "{per_1000:.1} transactions per 1,000 reminders (bound 80; the design makes about 63, see the module doc)"
    );
    assert!(
        rows_per_reminder <= 3.05,
        "{rows_per_reminder:.3} rows written per reminder (the design writes 3)"
    );
    // Marks and results find their rows by primary key: the index of rows
    // in flight keeps an entry for every row the run ever had in flight
    // (until a vacuum), so reading it per mark grows with the backlog.
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&world.db.url)
        .await
        .unwrap();
    let in_flight_scans: i64 = sqlx::query_scalar(
        "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'reminders_in_flight'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(
        in_flight_scans <= 10,
        "the index of rows in flight was read {in_flight_scans} times in one tick (per mark or result?)"
    );
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
