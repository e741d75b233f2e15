//! The lease: skip when held, never delete another holder's key, min_hold,
//! the watchdog, and cancellation when the lease is lost.

use std::time::Duration;

use invoice_reminder::lock::{Acquisition, Released};
use invoice_reminder::reminders::{TickOutcome, run_tick};
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use crate::common::proxy::{Mode as ProxyMode, Proxy};
use crate::common::{self, SmtpMode, World};

async fn get(key: &str) -> Option<String> {
    common::redis_conn().await.get(key).await.unwrap()
}

async fn pttl(key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut common::redis_conn().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_lock_held_by_another_token_is_skipped() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 3).await;
    let _: () = common::redis_conn()
        .await
        .set_ex(world.lock_key(), "someone-else", 30)
        .await
        .unwrap();
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(outcome, TickOutcome::LockHeld);
    assert_eq!(world.sink.count(), 0);
    assert!(
        invoice_reminder::db::runs::recent_runs(world.pool(), 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        get(&world.lock_key()).await.as_deref(),
        Some("someone-else")
    );
}

#[tokio::test]
async fn the_lock_key_holds_exactly_the_token_while_a_tick_runs() {
    let mut world = World::new().await;
    world.set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 5).await;
    let ctx = world.context().await;
    let stop = CancellationToken::new();
    let tick = tokio::spawn(async move { run_tick(&ctx, &stop).await });

    common::wait_until(
        "the first mail arrives",
        Duration::from_secs(10),
        || async { world.sink.count() >= 1 },
    )
    .await;
    let value = get(&world.lock_key())
        .await
        .expect("key exists while the tick runs");
    tick.await.unwrap().unwrap();

    let runs = invoice_reminder::db::runs::recent_runs(world.pool(), 1)
        .await
        .unwrap();
    assert_eq!(runs[0].lock_token.map(|t| t.to_string()), Some(value));
    assert_eq!(
        get(&world.lock_key()).await,
        None,
        "released (min_hold is 0)"
    );
}

#[tokio::test]
async fn release_never_deletes_another_holders_key() {
    let world = World::new().await;
    let ctx = world.context().await;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire().await.unwrap() else {
        panic!("expected to acquire a free lock");
    };
    // Our lease expired and another replica took the lock.
    let _: () = common::redis_conn()
        .await
        .set(world.lock_key(), "other-token")
        .await
        .unwrap();

    let released = lease.release().await.unwrap();

    assert_eq!(released, Released::NotOwner);
    assert_eq!(get(&world.lock_key()).await.as_deref(), Some("other-token"));
}

#[tokio::test]
async fn release_deletes_our_own_key() {
    let world = World::new().await;
    let ctx = world.context().await;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire().await.unwrap() else {
        panic!("expected to acquire a free lock");
    };
    assert_eq!(
        get(&world.lock_key()).await,
        Some(lease.token().to_string())
    );

    assert_eq!(lease.release().await.unwrap(), Released::Deleted);

    assert_eq!(get(&world.lock_key()).await, None);
}

#[tokio::test]
async fn a_tick_shorter_than_min_hold_leaves_the_key_until_min_hold() {
    let mut world = World::new().await;
    world.set("lock.min_hold", "5s");
    common::insert_overdue(world.pool(), 1).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let runs = invoice_reminder::db::runs::recent_runs(world.pool(), 1)
        .await
        .unwrap();
    assert_eq!(
        get(&world.lock_key()).await,
        runs[0].lock_token.map(|t| t.to_string())
    );
    let left = pttl(&world.lock_key()).await;
    assert!(
        left > 0 && left <= 5000,
        "key should expire within min_hold, PTTL = {left}"
    );
    // A replica whose clock is behind fires the same tick again: skipped.
    let late = world.context().await;
    assert_eq!(
        run_tick(&late, &CancellationToken::new()).await.unwrap(),
        TickOutcome::LockHeld
    );
}

#[tokio::test]
async fn the_watchdog_keeps_the_lock_alive_through_a_tick_longer_than_the_ttl() {
    let mut world = World::new().await;
    world
        .set("lock.ttl", "1s")
        .set("lock.renew_every", "200ms")
        .set("redis.timeout", "300ms")
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 30).await; // ~3 s of sending: three TTLs
    let holder = world.context().await;
    let rival = world.context().await;
    let stop = CancellationToken::new();
    let tick = {
        let stop = stop.clone();
        tokio::spawn(async move { run_tick(&holder, &stop).await })
    };
    common::wait_until(
        "the holder sends its first mail",
        Duration::from_secs(10),
        || async { world.sink.count() >= 1 },
    )
    .await;

    let mut rival_attempts = 0;
    while !tick.is_finished() {
        let outcome = run_tick(&rival, &stop).await.unwrap();
        if !tick.is_finished() {
            assert_eq!(
                outcome,
                TickOutcome::LockHeld,
                "a rival got in while the tick ran"
            );
            rival_attempts += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let outcome = tick.await.unwrap().unwrap();
    assert!(
        matches!(outcome, TickOutcome::Done(ref s) if s.sent == 30),
        "{outcome:?}"
    );
    assert!(
        rival_attempts > 10,
        "the rival tried only {rival_attempts} times"
    );
}

#[tokio::test]
async fn a_stolen_lock_cancels_the_job_before_the_next_mail() {
    let mut world = World::new().await;
    world
        .set("lock.ttl", "5s")
        .set("lock.renew_every", "100ms")
        .set("reminders.send_concurrency", 1)
        .set("reminders.batch_size", 100);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 60).await;
    let ctx = world.context().await;
    let stop = CancellationToken::new();
    let tick = tokio::spawn(async move { run_tick(&ctx, &stop).await });

    common::wait_until("three mails arrive", Duration::from_secs(10), || async {
        world.sink.count() >= 3
    })
    .await;
    let _: () = common::redis_conn()
        .await
        .set(world.lock_key(), "thief")
        .await
        .unwrap();
    let at_theft = world.sink.count();
    let outcome = tick.await.unwrap().unwrap();

    let TickOutcome::LockLost(summary) = outcome else {
        panic!("expected LockLost, got {outcome:?}");
    };
    // One renewal interval (100 ms) is one mail: at most the one in flight
    // and one more can finish after the theft.
    assert!(
        world.sink.count() <= at_theft + 2,
        "{} mails after the theft",
        world.sink.count() - at_theft
    );
    assert_eq!(summary.sent as usize, world.sink.count());
    assert_eq!(
        get(&world.lock_key()).await.as_deref(),
        Some("thief"),
        "the thief's key is untouched"
    );
    // Nothing is left `sending`: unsent rows were handed back.
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
    assert_eq!(
        common::count_status(world.pool(), "sent").await as usize,
        world.sink.count()
    );
    let runs = invoice_reminder::db::runs::recent_runs(world.pool(), 1)
        .await
        .unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("lost_lock"));
}

#[tokio::test]
async fn a_key_that_vanishes_cancels_the_job_and_is_never_recreated() {
    // What a Redis restarted empty looks like to the holder.
    let mut world = World::new().await;
    world
        .set("lock.renew_every", "100ms")
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 40).await;
    let ctx = world.context().await;
    let stop = CancellationToken::new();
    let tick = tokio::spawn(async move { run_tick(&ctx, &stop).await });

    common::wait_until("two mails arrive", Duration::from_secs(10), || async {
        world.sink.count() >= 2
    })
    .await;
    let _: () = common::redis_conn()
        .await
        .del(world.lock_key())
        .await
        .unwrap();
    let outcome = tick.await.unwrap().unwrap();

    assert!(matches!(outcome, TickOutcome::LockLost(_)), "{outcome:?}");
    assert_eq!(
        get(&world.lock_key()).await,
        None,
        "the watchdog must not re-create the key"
    );
    assert!(world.sink.count() < 40);
}

#[tokio::test]
async fn the_lease_lapses_by_the_local_clock_when_redis_stops_answering() {
    let proxy = Proxy::for_redis().await;
    let mut world = World::new().await;
    world
        .set("redis.url", proxy.redis_url())
        .set("lock.ttl", "1s")
        .set("lock.renew_every", "200ms")
        .set("redis.timeout", "200ms")
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(50)));
    common::insert_overdue(world.pool(), 200).await; // ~10 s if nothing stopped it
    let ctx = world.context().await;
    let stop = CancellationToken::new();
    let tick = tokio::spawn(async move { run_tick(&ctx, &stop).await });

    common::wait_until("two mails arrive", Duration::from_secs(10), || async {
        world.sink.count() >= 2
    })
    .await;
    proxy.set_mode(ProxyMode::Stall);
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(8), tick)
        .await
        .expect("the tick must stop by itself")
        .unwrap()
        .unwrap();

    assert!(matches!(outcome, TickOutcome::LockLost(_)), "{outcome:?}");
    // Trusted for at most ttl - ttl/5 = 800 ms after the last renewal,
    // plus the release attempt (one redis.timeout).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(world.sink.count() < 200);
    proxy.set_mode(ProxyMode::Pass);
}

#[tokio::test]
async fn an_acquire_whose_reply_is_lost_checks_once_for_its_own_token() {
    let proxy = Proxy::for_redis().await;
    let mut world = World::new().await;
    world
        .set("redis.url", proxy.redis_url())
        .set("redis.timeout", "300ms");
    let ctx = world.context().await;
    ctx.lock.holder().await.unwrap(); // open the shared connection

    proxy.withhold_replies_on_open_connections();
    let acquisition = ctx.lock.try_acquire().await.unwrap();
    proxy.deliver_replies();

    let Acquisition::Acquired(lease) = acquisition else {
        panic!("the SET went through; the check must find our token, got {acquisition:?}");
    };
    assert_eq!(
        get(&world.lock_key()).await,
        Some(lease.token().to_string())
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn an_acquire_whose_reply_is_lost_and_key_is_not_ours_is_not_acquired() {
    let proxy = Proxy::for_redis().await;
    let mut world = World::new().await;
    world
        .set("redis.url", proxy.redis_url())
        .set("redis.timeout", "300ms");
    let ctx = world.context().await;
    ctx.lock.holder().await.unwrap();
    let _: () = common::redis_conn()
        .await
        .set_ex(world.lock_key(), "other", 30)
        .await
        .unwrap();

    proxy.withhold_replies_on_open_connections();
    let acquisition = ctx.lock.try_acquire().await.unwrap();
    proxy.deliver_replies();

    assert!(
        matches!(acquisition, Acquisition::Unknown),
        "{acquisition:?}"
    );
    assert_eq!(get(&world.lock_key()).await.as_deref(), Some("other"));
}

#[tokio::test]
async fn redis_down_fails_the_tick_with_a_clear_error_and_sends_nothing() {
    let proxy = Proxy::for_redis().await;
    let mut world = World::new().await;
    world.set("redis.url", proxy.redis_url());
    common::insert_overdue(world.pool(), 3).await;
    let ctx = world.context().await;
    proxy.go_down();

    let err = run_tick(&ctx, &CancellationToken::new()).await.unwrap_err();

    assert!(
        err.to_string().contains("lock backend unavailable"),
        "{err}"
    );
    assert_eq!(world.sink.count(), 0);
}
