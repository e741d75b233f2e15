//! Through a real PgBouncer in transaction mode (Debian's 1.18, as managed
//! poolers run it): the worker works with `database.pooler = "transaction"`
//! and the one setting every pooler user already has
//! (`ignore_startup_parameters = extra_float_digits`); `migrate` refuses;
//! a refused login is one configuration error naming `database.url`.

use std::time::Duration;

use crate::common::pgbouncer::PgBouncer;
use crate::common::{self, World};
use crate::harness::{self, Replica, ReplicaOptions};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A world whose worker reaches PostgreSQL through `bouncer`.
async fn world_through(bouncer: &PgBouncer, pooler: &str) -> World {
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    let url = bouncer.url(&world.db.url);
    world
        .set("database.url", url)
        .set("database.pooler", pooler)
        .set("lock.backend", "redis");
    world
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pooler_transaction_two_replicas_through_pgbouncer_mail_each_invoice_once() {
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "transaction").await;
    common::insert_overdue(world.pool(), 400).await;

    let out = common::cli(&world, &["run-once"]).await;
    assert!(out.status.success(), "{}\n{}", stderr(&out), bouncer.log());
    let mut replicas = harness::spawn_replicas(&world, 2);
    common::insert_overdue(world.pool(), 100).await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;
    for r in &replicas {
        assert!(
            !r.log().contains("prepared statement"),
            "{}\n{}",
            r.log(),
            bouncer.log()
        );
    }
    let out = common::cli(&world, &["audit", "--json"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pooler_transaction_the_same_pgbouncer_turns_the_worker_away() {
    // The control experiment: the setting is what makes the above work.
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "none").await;
    common::insert_overdue(world.pool(), 10).await;

    let out = common::cli(&world, &["run-once"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unsupported startup parameter"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_through_a_transaction_pooler_is_refused_with_a_line_saying_to_use_a_direct_url() {
    let bouncer = PgBouncer::start(None).await;
    let world = world_through(&bouncer, "transaction").await;

    let out = common::cli(&world, &["migrate"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("database.pooler") && err.contains("direct"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_with_the_postgres_lock_exits_2_naming_both_keys() {
    let mut world = World::new().await;
    world
        .set("database.pooler", "transaction")
        .set("lock.backend", "postgres");

    let out = common::cli(&world, &["run-once"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("database.pooler") && err.contains("lock.backend"),
        "{err}"
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_database_password_is_one_configuration_error_naming_database_url() {
    let bouncer = PgBouncer::start(Some("right-secret")).await;
    for (command, backend) in [("run-once", "redis"), ("run", "redis"), ("run", "postgres")] {
        let mut world = World::new().await;
        harness::fast_replicas(&mut world);
        let url = bouncer
            .url(&world.db.url)
            .replace("postgres@", "postgres:wrong-secret@");
        world.set("database.url", url).set("lock.backend", backend);
        let mut replica = Replica::spawn(
            &world,
            &format!("{command}-{backend}"),
            ReplicaOptions {
                command: vec![command.into()],
                ..ReplicaOptions::default()
            },
        );
        let status = replica
            .wait_exit(Duration::from_secs(20))
            .await
            .expect("exits");
        let log = replica.log();
        assert_eq!(status.code(), Some(2), "{command} ({backend}): {log}");
        assert!(log.contains("database.url"), "{log}");
        assert!(!log.contains("wrong-secret"), "the password leaked: {log}");
        assert!(!log.contains("result unknown"), "{log}");
    }
}
