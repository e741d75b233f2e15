//! Scenario 2: the lock fails completely and the database alone prevents
//! duplicates. This is the core claim of the project.

use std::time::Duration;

use crate::common::{self, SmtpMode, World};
use crate::harness::{self, RedisServer, Replica, ReplicaOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_each_holding_the_lock_in_a_different_redis_still_mail_each_invoice_once() {
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    world
        .set("reminders.batch_size", 25)
        .set("reminders.send_concurrency", 4);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(2)));
    common::insert_overdue(world.pool(), 2000).await;
    let redises = [
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let mut replicas: Vec<Replica> = redises
        .iter()
        .enumerate()
        .map(|(i, redis)| {
            Replica::spawn(
                &world,
                &format!("r{i}"),
                ReplicaOptions {
                    env: vec![("INVOICE_REMINDER__REDIS__URL".into(), redis.url())],
                    ..ReplicaOptions::default()
                },
            )
        })
        .collect();

    harness::wait_until_settled(&world, &[], Duration::from_secs(90)).await;
    for r in &mut replicas {
        r.stop_gracefully().await;
    }

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 2000);
    // The lock really failed: the replicas worked side by side.
    assert!(
        !harness::overlapping_runs(&world).await.is_empty(),
        "runs never overlapped"
    );
    let claimers: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT replica_id) FROM job_runs WHERE claimed > 0")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert!(claimers >= 2, "only {claimers} replica(s) claimed anything");
}
