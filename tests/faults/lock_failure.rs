//! The lock fails completely and the database alone prevents
//! duplicates. This is the core claim of the project.

use std::time::Duration;

use crate::common::{self, Backend, SmtpMode};
use crate::for_each_backend;
use crate::harness::{self, RedisServer, Replica, ReplicaOptions};

for_each_backend!(replicas_that_each_hold_a_different_lock_at_once_still_mail_each_invoice_once);

/// Redis: each replica talks to a Redis of its own. PostgreSQL: each
/// replica locks a different key (a different advisory lock id). Either way
/// every replica "holds the lock" at the same time.
async fn replicas_that_each_hold_a_different_lock_at_once_still_mail_each_invoice_once(
    backend: Backend,
) {
    let mut world = harness::world_for(backend).await;
    world
        .set("reminders.batch_size", 25)
        .set("reminders.send_concurrency", 4);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(2)));
    common::insert_overdue(world.pool(), 2000).await;
    let mut redises = Vec::new();
    let mut replicas = Vec::new();
    for i in 0..3 {
        let own_lock = match backend {
            Backend::Redis => {
                let redis = RedisServer::start().await;
                let env = ("INVOICE_REMINDER__REDIS__URL".to_owned(), redis.url());
                redises.push(redis);
                env
            }
            Backend::Postgres => (
                "INVOICE_REMINDER__LOCK__KEY".to_owned(),
                format!("{}-{i}", world.lock_key()),
            ),
        };
        let options = ReplicaOptions {
            env: vec![own_lock],
            ..ReplicaOptions::default()
        };
        replicas.push(Replica::spawn(&world, &format!("r{i}"), options));
    }

    harness::wait_until_settled(&world, &[], Duration::from_secs(90)).await;
    harness::stop_all(&mut replicas).await;

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
