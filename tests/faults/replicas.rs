//! Replicas racing, dying and freezing.

use std::time::Duration;

use crate::common::{self, Backend, SmtpMode};
use crate::harness::{self, Replica, ReplicaOptions, Source};
use crate::{for_each_backend, for_each_backend_and_source};

for_each_backend_and_source!(
    three_replicas_over_thirty_ticks_mail_each_invoice_exactly_once,
    a_holder_killed_mid_batch_is_replaced_within_ttl_and_one_tick_and_nothing_is_resent,
);

for_each_backend!(
    two_replicas_sharing_one_replica_id_are_told_apart_by_their_tokens,
    a_holder_paused_past_its_ttl_wakes_to_a_lost_lock_and_sends_nothing_more,
    a_tick_lasting_several_ttls_keeps_its_lock_and_no_other_replica_runs_meanwhile,
);

async fn three_replicas_over_thirty_ticks_mail_each_invoice_exactly_once(
    backend: Backend,
    source: Source,
) {
    let mut world = harness::world_with(backend, source).await;
    world.set("reminders.batch_size", 200);
    common::insert_overdue(world.pool(), 2000).await;
    let adder = harness::keep_adding_overdue(&world, 40, Duration::from_millis(700), 30);
    let mut replicas = harness::spawn_replicas(&world, 3);

    harness::wait_for_runs(&world, 30, Duration::from_secs(120)).await;
    let total = 2000 + adder.await.unwrap();
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    for r in &mut replicas {
        assert_eq!(
            r.stop_gracefully().await.and_then(|s| s.code()),
            Some(0),
            "{}",
            r.log()
        );
    }

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count() as i64, total);
    if source == Source::UserView {
        // Read through the user's view: its per-invoice payment link.
        for mail in world.sink.received() {
            assert!(
                mail.body.contains("https://pay.example.test/INV-"),
                "{}",
                mail.body
            );
        }
    }
    assert_eq!(
        harness::overlapping_runs(&world).await,
        vec![],
        "job_runs overlapped"
    );
}

async fn two_replicas_sharing_one_replica_id_are_told_apart_by_their_tokens(backend: Backend) {
    let mut world = harness::world_for(backend).await;
    // Held past each tick's end, so the replica that fires second in a cron
    // slot always finds the lock taken, however fast the first one was.
    world.set("lock.min_hold", "800ms");
    common::insert_overdue(world.pool(), 500).await;
    let adder = harness::keep_adding_overdue(&world, 30, Duration::from_millis(500), 16);
    let same_name = ReplicaOptions {
        replica_id: Some("pod-1".into()),
        ..ReplicaOptions::default()
    };
    let mut replicas = vec![
        Replica::spawn(&world, "a", same_name.clone()),
        Replica::spawn(&world, "b", same_name),
    ];

    harness::wait_for_runs(&world, 12, Duration::from_secs(60)).await;
    adder.await.unwrap();
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(harness::overlapping_runs(&world).await, vec![]);
    let (runs, tokens): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT lock_token) FROM job_runs")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(runs, tokens, "every run had a token of its own");
    // Which replica wins each race is up to the scheduler, and one may win
    // all of them; what matters is that both took part in the ticks and the
    // shared name never let the loser believe it held the lock.
    let skipped: usize = replicas
        .iter()
        .map(|r| r.log().matches("lock held, skipping").count())
        .sum();
    assert!(skipped > 0, "the two replicas never contended for a tick");
    for r in &replicas {
        let log = r.log();
        assert!(
            log.contains("tick finished") || log.contains("lock held, skipping"),
            "each replica took part in the ticks: {log}"
        );
    }
}

async fn a_holder_killed_mid_batch_is_replaced_within_ttl_and_one_tick_and_nothing_is_resent(
    backend: Backend,
    source: Source,
) {
    let mut world = harness::world_with(backend, source).await;
    harness::slow_down(&mut world);
    let mut replicas = harness::start_mid_backlog(&world, 1200, 3, 200).await;
    let holder = backend
        .holder_replica(&world)
        .await
        .expect("someone holds the lock mid-batch");
    let victim = replicas
        .iter_mut()
        .find(|r| r.name == holder)
        .expect("holder is ours");
    victim.kill();
    let killed_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(world.pool())
        .await
        .unwrap();

    common::wait_until(
        "another replica takes over",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM job_runs WHERE replica_id <> $1 AND started_at > $2",
            )
            .bind(&holder)
            .bind(killed_at)
            .fetch_one(world.pool())
            .await
            .unwrap()
                > 0
        },
    )
    .await;
    let takeover: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(started_at) - $2)::float8 FROM job_runs WHERE replica_id <> $1 AND started_at > $2",
    )
    .bind(&holder)
    .bind(killed_at)
    .fetch_one(world.pool())
    .await
    .unwrap();
    // TTL (2 s) plus one cron interval (1 s), with room for a loaded machine.
    assert!(takeover < 4.5, "takeover took {takeover:.2} s");

    harness::wait_until_settled(&world, &[holder.as_str()], Duration::from_secs(90)).await;
    harness::stop_all(&mut replicas).await;
    // Rows the dead replica claimed but never started were returned and
    // sent by the others. What stays unknown is what it started: mail the
    // server received but it never recorded, plus at most the in-flight limit
    // (send_concurrency = 2) of rows it had marked and not finished.
    let report = harness::assert_exactly_once(&world, 2 * 50).await;
    let unknown = report["unknown"].as_array().unwrap();
    assert!(
        unknown.iter().all(|u| u["replica_id"] == holder.as_str()),
        "{unknown:?}"
    );
    let received: std::collections::HashSet<i64> = world.sink.invoice_ids().into_iter().collect();
    let never_received: Vec<&serde_json::Value> = unknown
        .iter()
        .filter(|u| {
            !u["invoice_id"]
                .as_str()
                .and_then(|id| id.parse::<i64>().ok())
                .is_some_and(|id| received.contains(&id))
        })
        .collect();
    assert!(
        never_received.len() <= 2,
        "{} unknown rows the server never received (at most the in-flight limit, send_concurrency = 2): {never_received:?}",
        never_received.len()
    );
}

async fn a_holder_paused_past_its_ttl_wakes_to_a_lost_lock_and_sends_nothing_more(
    backend: Backend,
) {
    let mut world = harness::world_for(backend).await;
    harness::slow_down(&mut world);
    let mut replicas = harness::start_mid_backlog(&world, 1500, 2, 100).await;
    let holder = backend
        .holder_replica(&world)
        .await
        .expect("someone holds the lock");
    let paused_run: i64 = sqlx::query_scalar(
        "SELECT id FROM job_runs WHERE replica_id = $1 AND finished_at IS NULL ORDER BY id DESC LIMIT 1",
    )
    .bind(&holder)
    .fetch_one(world.pool())
    .await
    .unwrap();
    let sleeper = replicas.iter().position(|r| r.name == holder).unwrap();
    replicas[sleeper].pause();
    if backend == Backend::Postgres {
        // An advisory lock outlives a paused process as long as its session
        // does; the server dropping that session (a keepalive timeout, a
        // DBA) is what lets another replica take over.
        backend.break_lock(&world).await;
    }
    let at_pause = world.sink.count();

    common::wait_until(
        "the other replica works while it sleeps",
        Duration::from_secs(20),
        || async { world.sink.count() >= at_pause + 100 },
    )
    .await;
    let woke = std::time::Instant::now();
    replicas[sleeper].resume();

    harness::wait_until_settled(&world, &[], Duration::from_secs(90)).await;
    harness::stop_all(&mut replicas).await;
    harness::assert_exactly_once(&world, 0).await;
    let outcome: Option<String> = sqlx::query_scalar("SELECT outcome FROM job_runs WHERE id = $1")
        .bind(paused_run)
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(outcome.as_deref(), Some("lost_lock"));
    // After waking it may only finish what was already on the wire.
    let by_sleeper_after_waking = world
        .sink
        .received()
        .iter()
        .filter(|m| m.received_at > woke)
        .filter_map(|m| m.invoice_id())
        .collect::<Vec<_>>();
    let sent_by_paused_run: Vec<i64> = sqlx::query_scalar(
        "SELECT invoice_id::bigint FROM reminders WHERE run_id = $1 AND invoice_id = ANY($2::text[])",
    )
    .bind(paused_run)
    .bind(&by_sleeper_after_waking)
    .fetch_all(world.pool())
    .await
    .unwrap();
    assert!(
        sent_by_paused_run.len() <= 2,
        "the woken replica kept sending: {sent_by_paused_run:?}"
    );
}

async fn a_tick_lasting_several_ttls_keeps_its_lock_and_no_other_replica_runs_meanwhile(
    backend: Backend,
) {
    let mut world = harness::world_for(backend).await;
    world
        .set("lock.ttl", "1s")
        .set("lock.renew_every", "200ms")
        .set("redis.timeout", "300ms")
        .set("reminders.send_concurrency", 1)
        .set("reminders.batch_size", 20);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(50)));
    common::insert_overdue(world.pool(), 100).await;
    let mut replicas = harness::spawn_replicas(&world, 3);

    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(harness::overlapping_runs(&world).await, vec![]);
    let (working_runs, longest): (i64, f64) = sqlx::query_as(
        "SELECT count(*), max(extract(epoch FROM finished_at - started_at))::float8
           FROM job_runs WHERE claimed > 0",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert_eq!(working_runs, 1, "one tick did all the work");
    assert!(
        longest > 4.0,
        "the tick lasted {longest:.1} s, not several TTLs"
    );
    let skipped: usize = replicas
        .iter()
        .map(|r| r.log().matches("lock held, skipping").count())
        .sum();
    assert!(
        skipped >= 4,
        "other replicas should have found the lock held ({skipped} skips)"
    );
}
