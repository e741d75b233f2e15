//! The lease: skip when held, never free another holder's lock, min_hold,
//! the watchdog, and cancellation when the lease is lost. Each test runs
//! for both lock backends (`for_each_backend!`), except the few about
//! Redis's own failure modes (a lost SET reply, an unreachable Redis).

use std::time::Duration;

use invoice_reminder::lock::{Acquisition, Released};
use invoice_reminder::tick::{TickOutcome, run_tick};
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use crate::common::proxy::{Mode as ProxyMode, Proxy};
use crate::common::{self, Backend, SmtpMode, World};
use crate::for_each_backend;

async fn world_for(backend: Backend) -> World {
    let mut world = World::new().await;
    backend.configure(&mut world);
    world
}

async fn get(key: &str) -> Option<String> {
    common::redis_conn().await.get(key).await.unwrap()
}

for_each_backend!(
    a_lock_held_by_another_holder_is_skipped,
    while_a_tick_runs_the_lock_names_its_run,
    release_never_frees_another_holders_lock,
    release_frees_our_own_lock,
    a_tick_shorter_than_min_hold_keeps_the_lock_until_min_hold,
    the_watchdog_keeps_the_lock_alive_through_a_tick_longer_than_the_ttl,
    a_stolen_lock_cancels_the_job_before_the_next_mail,
    a_lock_that_vanishes_cancels_the_job_and_is_never_recreated,
);

async fn a_lock_held_by_another_holder_is_skipped(backend: Backend) {
    let world = world_for(backend).await;
    common::insert_overdue(world.pool(), 3).await;
    let _other = backend.hold_elsewhere(&world).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(outcome, TickOutcome::LockHeld);
    assert_eq!(world.sink.count(), 0);
    assert!(
        invoice_reminder::db::runs::recent_runs(&world.database(), 5)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend.is_held(&world).await,
        "the other holder keeps its lock"
    );
}

async fn while_a_tick_runs_the_lock_names_its_run(backend: Backend) {
    let mut world = world_for(backend).await;
    world
        .set("reminders.send_concurrency", 1)
        .set("replica_id", "replica-under-test");
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 5).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(1).await;
    let holder = backend.holder_replica(&world).await;
    let redis_value = get(&world.lock_key()).await;
    tick.outcome().await;

    assert_eq!(holder.as_deref(), Some("replica-under-test"));
    let run = &invoice_reminder::db::runs::recent_runs(&world.database(), 1)
        .await
        .unwrap()[0];
    assert!(
        run.fence_token.is_some_and(|f| f > 0),
        "the run records its fencing token"
    );
    if backend == Backend::Redis {
        // The key's value is exactly the run's token, for operators to GET.
        assert_eq!(run.lock_token.map(|t| t.to_string()), redis_value);
    }
    assert!(!backend.is_held(&world).await, "released (min_hold is 0)");
}

async fn release_never_frees_another_holders_lock(backend: Backend) {
    let world = world_for(backend).await;
    let ctx = world.context().await;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire(0).await.unwrap() else {
        panic!("expected to acquire a free lock");
    };
    // Our lease lapsed and another replica took the lock.
    let _thief = backend.steal(&world).await;

    let released = lease.release().await.unwrap();

    assert_eq!(released, Released::NotOwner);
    assert!(backend.thief_holds(&world).await);
}

async fn release_frees_our_own_lock(backend: Backend) {
    let world = world_for(backend).await;
    let ctx = world.context().await;
    let Acquisition::Acquired(lease) = ctx.lock.try_acquire(0).await.unwrap() else {
        panic!("expected to acquire a free lock");
    };
    assert!(backend.is_held(&world).await);
    if backend == Backend::Redis {
        assert_eq!(
            get(&world.lock_key()).await,
            Some(lease.token().to_string())
        );
    }

    assert_eq!(lease.release().await.unwrap(), Released::Deleted);

    assert!(!backend.is_held(&world).await);
}

async fn a_tick_shorter_than_min_hold_keeps_the_lock_until_min_hold(backend: Backend) {
    let mut world = world_for(backend).await;
    world.set("lock.min_hold", "2s");
    common::insert_overdue(world.pool(), 1).await;
    let ctx = world.context().await;
    let started = tokio::time::Instant::now();

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the tick itself does not wait for min_hold"
    );
    assert!(
        backend.is_held(&world).await,
        "still held right after the tick"
    );
    if backend == Backend::Redis {
        let left: i64 = redis::cmd("PTTL")
            .arg(world.lock_key())
            .query_async(&mut common::redis_conn().await)
            .await
            .unwrap();
        assert!(
            left > 0 && left <= 2000,
            "the key expires within min_hold, PTTL = {left}"
        );
    }
    // A replica whose clock is behind fires the same tick again: skipped.
    let late = world.context().await;
    assert_eq!(
        run_tick(&late, &CancellationToken::new()).await.unwrap(),
        TickOutcome::LockHeld
    );
    // And at acquired + min_hold the lock is free again.
    common::wait_until(
        "the lock is free after min_hold",
        Duration::from_secs(5),
        || async { !backend.is_held(&world).await },
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(1900));
    ctx.lock.finish().await;
}

async fn the_watchdog_keeps_the_lock_alive_through_a_tick_longer_than_the_ttl(backend: Backend) {
    let mut world = world_for(backend).await;
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
    let tick = common::spawn_tick(holder);
    world.wait_for_mails(1).await;

    let mut rival_attempts = 0;
    while !tick.handle.is_finished() {
        let outcome = run_tick(&rival, &CancellationToken::new()).await.unwrap();
        if !tick.handle.is_finished() {
            assert_eq!(
                outcome,
                TickOutcome::LockHeld,
                "a rival got in while the tick ran"
            );
            rival_attempts += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let outcome = tick.outcome().await;
    assert!(
        matches!(outcome, TickOutcome::Done(ref s) if s.counts.sent == 30),
        "{outcome:?}"
    );
    assert!(
        rival_attempts > 10,
        "the rival tried only {rival_attempts} times"
    );
}

async fn a_stolen_lock_cancels_the_job_before_the_next_mail(backend: Backend) {
    let mut world = world_for(backend).await;
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
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(3).await;
    let _thief = backend.steal(&world).await;
    let at_theft = world.sink.count();
    let outcome = tick.outcome().await;

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
    assert_eq!(summary.counts.sent as usize, world.sink.count());
    assert!(
        backend.thief_holds(&world).await,
        "the thief's lock is untouched"
    );
    // Nothing is left `sending`: unsent rows were handed back.
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
    assert_eq!(
        common::count_status(world.pool(), "sent").await as usize,
        world.sink.count()
    );
    let runs = invoice_reminder::db::runs::recent_runs(&world.database(), 1)
        .await
        .unwrap();
    assert_eq!(runs[0].outcome.as_deref(), Some("lost_lock"));
}

/// Redis restarted empty, or (PostgreSQL) the session holding the lock
/// killed with pg_terminate_backend.
async fn a_lock_that_vanishes_cancels_the_job_and_is_never_recreated(backend: Backend) {
    let mut world = world_for(backend).await;
    world
        .set("lock.renew_every", "100ms")
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 40).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(2).await;
    backend.break_lock(&world).await;
    let outcome = tick.outcome().await;

    assert!(matches!(outcome, TickOutcome::LockLost(_)), "{outcome:?}");
    assert!(
        !backend.is_held(&world).await,
        "the old holder must not re-create the lock"
    );
    assert!(world.sink.count() < 40);
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
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
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(2).await;
    proxy.set_mode(ProxyMode::Stall);
    let started = tokio::time::Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(8), tick.outcome())
        .await
        .expect("the tick must stop by itself");

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
    let acquisition = ctx.lock.try_acquire(0).await.unwrap();
    proxy.deliver_replies();

    let Acquisition::Acquired(lease) = acquisition else {
        panic!("the SET went through; the check must find our token, got {acquisition:?}");
    };
    assert_eq!(
        get(&world.lock_key()).await,
        Some(lease.token().to_string())
    );
    assert!(lease.fence() > 0);
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
    let acquisition = ctx.lock.try_acquire(0).await.unwrap();
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
