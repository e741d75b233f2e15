//! A replica whose clock runs behind fires every cron tick
//! late; `min_hold` keeps it from working the same tick again.

use std::time::Duration;

use crate::common::{self, Backend};
use crate::for_each_backend;
use crate::harness::{self, Replica, ReplicaOptions};

/// Runs an on-time and a 2 s-late replica on a 4 s cron for ~20 s and
/// returns the number of runs in each cron slot that had any.
async fn runs_per_slot(backend: Backend, min_hold: &str) -> Vec<i64> {
    let mut world = harness::world_for(backend).await;
    world
        .set("schedule.cron", "*/4 * * * * *")
        .set("lock.min_hold", min_hold);
    common::insert_overdue(world.pool(), 20).await;
    let mut replicas = vec![
        Replica::spawn(&world, "on-time", ReplicaOptions::default()),
        Replica::spawn(
            &world,
            "late",
            ReplicaOptions {
                faketime: Some("-2s".into()),
                ..ReplicaOptions::default()
            },
        ),
    ];
    common::wait_until(
        "six cron slots were worked",
        Duration::from_secs(60),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(DISTINCT floor(extract(epoch FROM started_at) / 4)) FROM job_runs",
            )
            .fetch_one(world.pool())
            .await
            .unwrap()
                >= 6
        },
    )
    .await;
    harness::stop_all(&mut replicas).await;
    harness::assert_exactly_once(&world, 0).await;
    // The late replica really did fire (it found the lock held, or it worked).
    assert!(replicas[1].log().contains("lock held") || replicas[1].log().contains("tick finished"));
    // Ignore the first and last slot, which the window may cut.
    let per_slot: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FROM job_runs GROUP BY floor(extract(epoch FROM started_at) / 4) ORDER BY 1",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    per_slot
}

for_each_backend!(
    with_min_hold_a_replica_whose_clock_is_behind_does_not_run_a_tick_twice,
    without_min_hold_the_same_late_replica_runs_ticks_twice,
);

async fn with_min_hold_a_replica_whose_clock_is_behind_does_not_run_a_tick_twice(backend: Backend) {
    let per_slot = runs_per_slot(backend, "3s").await;
    assert!(
        per_slot.iter().all(|&n| n == 1),
        "runs per cron slot: {per_slot:?}"
    );
}

async fn without_min_hold_the_same_late_replica_runs_ticks_twice(backend: Backend) {
    // The control experiment: it shows the scenario above can fail.
    let per_slot = runs_per_slot(backend, "0s").await;
    assert!(
        per_slot.iter().any(|&n| n >= 2),
        "runs per cron slot: {per_slot:?}"
    );
}

/// Makes the test database's clock (the one "today" is read from) run
/// `behind` behind a replica whose own clock starts at `replica_start`.
async fn database_clock_behind(
    world: &crate::common::World,
    replica_start: chrono::DateTime<chrono::Utc>,
    behind: Duration,
) {
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(world.pool())
        .await
        .unwrap();
    let shift = (replica_start - now).num_milliseconds() - behind.as_millis() as i64;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE OR REPLACE FUNCTION invoice_reminder_clock() RETURNS timestamptz
             LANGUAGE sql STABLE AS $$ SELECT now() + interval '{shift} milliseconds' $$"
    )))
    .execute(world.pool())
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_runs_ahead_works_the_midnight_slots_day_not_the_day_before() {
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("schedule.cron", "0 0 0 * * *")
        .set("schedule.timezone", "UTC");
    common::insert_overdue(world.pool(), 5).await;
    // The replica's clock starts 3 s before midnight; the database's runs
    // 2 s behind it, so at the replica's midnight the database still reads
    // 23:59:58 of the day before.
    let start = chrono::DateTime::parse_from_rfc3339("2027-01-10T23:59:57Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    database_clock_behind(&world, start, Duration::from_secs(2)).await;
    let mut replica = Replica::spawn(
        &world,
        "fast",
        ReplicaOptions {
            faketime: Some("@2027-01-10 23:59:57".into()),
            ..ReplicaOptions::default()
        },
    );
    harness::wait_for_runs(&world, 1, Duration::from_secs(30)).await;
    replica.stop_gracefully().await;

    let run_dates: Vec<String> = sqlx::query_scalar("SELECT run_date FROM job_runs ORDER BY id")
        .fetch_all(world.pool())
        .await
        .unwrap();
    assert_eq!(
        run_dates,
        vec!["2027-01-11".to_owned()],
        "{}",
        replica.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_before_the_spring_transition_fires_at_the_new_local_time() {
    // Europe/Madrid, Sunday 2027-03-28: 02:00 CET becomes 03:00 CEST at
    // 01:00 UTC. The replica starts at 01:59:50 CET; its 03:00 fire is
    // 01:00:00 UTC, ten seconds later. A job that kept the offset it was
    // created with (+01:00) would fire at 02:00 UTC, an hour late.
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("schedule.cron", "0 0 3 * * *")
        .set("schedule.timezone", "Europe/Madrid");
    common::insert_overdue(world.pool(), 5).await;
    let start = chrono::DateTime::parse_from_rfc3339("2027-03-28T00:59:50Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    database_clock_behind(&world, start, Duration::ZERO).await;
    let mut replica = Replica::spawn(
        &world,
        "madrid",
        ReplicaOptions {
            faketime: Some("@2027-03-28 00:59:50".into()),
            ..ReplicaOptions::default()
        },
    );
    harness::wait_for_runs(&world, 1, Duration::from_secs(40)).await;
    replica.stop_gracefully().await;

    let run_date: String = sqlx::query_scalar("SELECT run_date FROM job_runs")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(run_date, "2027-03-28", "{}", replica.log());
    assert!(replica.log().contains("tick finished"), "{}", replica.log());
}
