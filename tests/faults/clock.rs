//! Scenario 9: a replica whose clock runs behind fires every cron tick
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
