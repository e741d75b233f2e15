//! SIGTERM during a tick.

use std::time::Duration;

use crate::common::{self, Backend, SmtpMode};
use crate::for_each_backend;
use crate::harness::{self, Replica, ReplicaOptions};

for_each_backend!(sigterm_mid_tick_finishes_the_mail_in_flight_releases_the_lock_and_exits_zero,);

async fn sigterm_mid_tick_finishes_the_mail_in_flight_releases_the_lock_and_exits_zero(
    backend: Backend,
) {
    let mut world = harness::world_for(backend).await;
    world
        .set("shutdown.timeout", "10s")
        .set("reminders.send_concurrency", 2)
        .set("reminders.batch_size", 20);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 200).await;
    let mut replica = Replica::spawn(&world, "r1", ReplicaOptions::default());

    common::wait_until("ten mails arrive", Duration::from_secs(30), || async {
        world.sink.count() >= 10
    })
    .await;
    replica.terminate();
    let started = tokio::time::Instant::now();
    let status = replica
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("exits within the shutdown timeout");

    assert_eq!(status.code(), Some(0), "{}", replica.log());
    assert!(started.elapsed() < Duration::from_secs(10));
    let tally = harness::tally(&world).await;
    assert_eq!(
        tally.sending, 0,
        "in-flight mail finished, the rest was handed back"
    );
    assert_eq!(tally.sent as usize, world.sink.count());
    assert!(tally.sent < 200);
    assert!(
        !backend.is_held(&world).await,
        "the lock was released (min_hold is 0)"
    );
    let outcome: Option<String> =
        sqlx::query_scalar("SELECT outcome FROM job_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(outcome.as_deref(), Some("shutdown"));

    // Whoever comes next sends the rest, once.
    world.sink.set_mode(SmtpMode::Accept);
    let mut next = Replica::spawn(&world, "r2", ReplicaOptions::default());
    harness::wait_until_settled(&world, &[], Duration::from_secs(30)).await;
    next.stop_gracefully().await;
    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 200);
}

/// Letters marked and waiting for their slot under `smtp.max_per_second`
/// are woken by SIGTERM and handed back: none of them is left unknown,
/// and the replica exits 0 within `shutdown.timeout`.
#[tokio::test]
async fn sigterm_wakes_letters_waiting_for_their_paced_slot_and_hands_them_back() {
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("shutdown.timeout", "5s")
        .set("smtp.max_per_second", 1);
    common::insert_overdue(world.pool(), 40).await;
    let mut replica = Replica::spawn(&world, "r1", ReplicaOptions::default());

    common::wait_until("three mails arrive", Duration::from_secs(30), || async {
        world.sink.count() >= 3
    })
    .await;
    replica.terminate();
    let started = tokio::time::Instant::now();
    let status = replica
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("exits within the shutdown timeout");

    assert_eq!(status.code(), Some(0), "{}", replica.log());
    assert!(started.elapsed() < Duration::from_secs(5));
    let tally = harness::tally(&world).await;
    assert_eq!(
        tally.sending,
        0,
        "no letter the relay never received is left unknown: {}",
        replica.log()
    );
    assert_eq!(tally.sent as usize, world.sink.count());
}
