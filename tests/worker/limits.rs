//! Operator limits: reminders per tick and messages per second.

use std::time::Duration;

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

#[tokio::test]
async fn max_per_tick_leaves_the_rest_for_the_next_ticks() {
    let mut world = World::new().await;
    world
        .set("reminders.max_per_tick", 7)
        .set("reminders.batch_size", 5);
    common::insert_overdue(world.pool(), 20).await;
    let ctx = world.context().await;
    let stop = CancellationToken::new();

    let mut per_tick = Vec::new();
    for _ in 0..4 {
        let outcome = run_tick(&ctx, &stop).await.unwrap();
        per_tick.push(outcome.summary().unwrap().counts.sent);
    }

    assert_eq!(per_tick, vec![7, 7, 6, 0]);
    assert_eq!(world.sink.count(), 20);
    common::assert_no_duplicate_mail(&world.sink);
    assert_eq!(
        common::count_status(world.pool(), "sending").await,
        0,
        "nothing claimed beyond the limit"
    );
}

#[tokio::test]
async fn max_per_second_spaces_the_messages_evenly() {
    let mut world = World::new().await;
    world
        .set("smtp.max_per_second", 20)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 11).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let mut arrivals: Vec<_> = world
        .sink
        .received()
        .iter()
        .map(|m| m.received_at)
        .collect();
    arrivals.sort();
    assert_eq!(arrivals.len(), 11);
    // Ten intervals of at least 50 ms, whatever the concurrency (a lower
    // bound only: a slow machine can only make this longer).
    let spread = arrivals[10] - arrivals[0];
    assert!(
        spread >= Duration::from_millis(450),
        "11 messages within {spread:?}"
    );
}

#[tokio::test]
async fn a_paced_tick_counts_the_time_its_relay_connection_stood_idle_between_messages() {
    let mut world = World::new().await;
    world
        .set("smtp.max_per_second", 20)
        .set("smtp.pool_size", 1)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 6).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(world.sink.received().len(), 6);
    let waits = outcome.summary().map(|s| s.waits).unwrap_or_default();
    // One connection, five gaps of at least 50 ms while the pacer held the
    // next letter: a lower bound only, a slow machine adds to it.
    assert!(
        waits.idle_connections >= 150,
        "the connection stood idle {} ms in all: {waits:?}",
        waits.idle_connections
    );
}

#[tokio::test]
async fn a_tick_held_back_by_its_relay_counts_the_time_its_next_mark_waited_for_room() {
    let mut world = World::new().await;
    world
        .set("smtp.max_per_second", 20)
        .set("smtp.pool_size", 1)
        .set("reminders.send_concurrency", 4);
    common::insert_overdue(world.pool(), 12).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(world.sink.received().len(), 12);
    common::assert_no_duplicate_mail(&world.sink);
    let waits = outcome.summary().map(|s| s.waits).unwrap_or_default();
    // Marks of two letters in a limit of four, at 20 messages a second:
    // after the first two marks each next one, written, waits for two
    // letters to go, 100 ms, about four times over. A lower bound only: a
    // slow machine adds to it.
    assert!(
        waits.mark_room >= 200,
        "the marker's next mark waited {} ms for room: {waits:?}",
        waits.mark_room
    );
}

#[tokio::test]
async fn a_connection_kept_from_the_last_tick_counts_only_this_ticks_part_of_its_idle_time() {
    let mut world = World::new().await;
    world.set("smtp.pool_size", 1);
    common::insert_invoice(world.pool(), "Ada", "ada@example.test", 12, false).await;
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    // The connection waits in the pool between the two ticks.
    tokio::time::sleep(Duration::from_millis(800)).await;
    common::insert_invoice(world.pool(), "Bea", "bea@example.test", 12, false).await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(world.sink.received().len(), 2);
    let waits = outcome.summary().map(|s| s.waits).unwrap_or_default();
    assert!(
        waits.idle_connections < 800,
        "the second tick counted the pause between the ticks: {waits:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_tick_at_full_speed_stops_soon_after_its_lock_is_stolen() {
    let mut world = World::new().await;
    world
        .set("lock.ttl", "5s")
        .set("lock.renew_every", "100ms")
        .set("reminders.send_concurrency", 16)
        .set("smtp.pool_size", 16);
    common::insert_overdue(world.pool(), 20_000).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(1000).await;
    let _thief = common::Backend::Redis.steal(&world).await;
    let at_theft = world.sink.count();
    let outcome = tick.outcome().await;

    assert!(
        matches!(outcome, invoice_reminder::tick::TickOutcome::LockLost(_)),
        "{outcome:?}"
    );
    // One renewal interval at full speed is a few hundred mails; without the
    // watchdog the remaining ~19 000 would all go out.
    let after = world.sink.count() - at_theft;
    assert!(after < 2000, "{after} mails after the theft");
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
    assert_eq!(
        common::count_status(world.pool(), "sent").await as usize,
        world.sink.count()
    );
}
