//! The lock lost mid-tick (Redis restarted empty; for the
//! PostgreSQL backend, the session holding the advisory lock terminated with
//! pg_terminate_backend), Redis down during and between ticks (skip), and
//! the database-only mode.
//!
//! The last two are Redis-only: with the PostgreSQL backend the lock
//! service *is* the database, so "the lock backend is down" is tests/faults/postgres.rs.

use std::time::Duration;

use redis::AsyncCommands;

use crate::common::{self, Backend, SmtpMode, World};
use crate::for_each_backend;
use crate::harness::{self, RedisServer};

fn use_redis(world: &mut World, redis: &RedisServer) {
    world.set("redis.url", redis.url());
}

for_each_backend!(a_lock_lost_mid_tick_cancels_the_tick_and_its_holder_never_recreates_it);

async fn a_lock_lost_mid_tick_cancels_the_tick_and_its_holder_never_recreates_it(backend: Backend) {
    let redis = &mut RedisServer::start().await;
    let mut world = harness::world_for(backend).await;
    use_redis(&mut world, redis);
    world
        .set("lock.renew_every", "200ms")
        .set("reminders.batch_size", 50)
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(20)));
    let mut replicas = harness::start_mid_backlog(&world, 400, 2, 30).await;
    let (run_id, token): (i64, uuid::Uuid) = sqlx::query_as(
        "SELECT id, lock_token FROM job_runs WHERE finished_at IS NULL ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    match backend {
        Backend::Redis => redis.restart().await,
        Backend::Postgres => backend.break_lock(&world).await,
    }

    common::wait_until(
        "the interrupted run ends",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, Option<String>>("SELECT outcome FROM job_runs WHERE id = $1")
                .bind(run_id)
                .fetch_one(world.pool())
                .await
                .unwrap()
                .is_some()
        },
    )
    .await;
    let outcome: String = sqlx::query_scalar("SELECT outcome FROM job_runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(outcome, "lost_lock");
    if backend == Backend::Redis {
        let key: Option<String> = redis.conn().await.get(world.lock_key()).await.unwrap();
        assert_ne!(
            key,
            Some(token.to_string()),
            "the old holder re-created its key"
        );
    }

    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;
    harness::assert_exactly_once(&world, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_replicas_skip_each_tick_with_one_error_send_nothing_and_resume_by_themselves()
 {
    let redis = &mut RedisServer::start().await;
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    use_redis(&mut world, redis);
    world
        .set("reminders.batch_size", 50)
        .set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(20)));
    let mut replicas = harness::start_mid_backlog(&world, 300, 2, 20).await;
    redis.stop();
    common::wait_until(
        "the tick in flight gives up",
        Duration::from_secs(10),
        || async { harness::tally(&world).await.open_runs == 0 },
    )
    .await;
    let quiet_from = world.sink.count();
    let errors_before: Vec<usize> = replicas
        .iter()
        .map(|r| unavailable_errors(&r.log()))
        .collect();
    let down_since = tokio::time::Instant::now();
    common::wait_until(
        "each replica skipped three ticks",
        Duration::from_secs(20),
        || async {
            replicas
                .iter()
                .zip(&errors_before)
                .all(|(r, before)| unavailable_errors(&r.log()) >= before + 3)
        },
    )
    .await;
    let down_for = down_since.elapsed().as_secs_f64();

    assert_eq!(
        world.sink.count(),
        quiet_from,
        "mail was sent while the lock was unavailable"
    );
    for (r, before) in replicas.iter_mut().zip(&errors_before) {
        assert!(r.is_running(), "{} died: {}", r.name, r.log());
        let errors = unavailable_errors(&r.log()) - before;
        // One line per skipped tick (one fire per second), not a flood.
        assert!(
            (errors as f64) <= down_for + 2.0,
            "{errors} errors in {down_for:.1} s"
        );
    }

    redis.restart().await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;
    harness::assert_exactly_once(&world, 0).await;
}

fn unavailable_errors(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("ERROR") && l.contains("lock backend unavailable"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_database_only_mode_replicas_keep_sending_without_redis_and_still_never_duplicate() {
    let redis = &mut RedisServer::start().await;
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    use_redis(&mut world, redis);
    world
        .set("lock.on_backend_error", "database-only")
        .set("reminders.batch_size", 25)
        .set("reminders.send_concurrency", 4);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(2)));
    common::insert_overdue(world.pool(), 1500).await;
    redis.stop();
    let mut replicas = harness::spawn_replicas(&world, 3);

    harness::wait_until_settled(&world, &[], Duration::from_secs(90)).await;
    harness::stop_all(&mut replicas).await;

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 1500);
    assert!(
        replicas
            .iter()
            .any(|r| r.log().contains("database backstop alone"))
    );
    let unlocked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_runs WHERE lock_token IS NULL AND claimed > 0",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert!(unlocked > 0, "runs worked without a lock token");
}
