//! The SMTP server refusing (4xx), rejecting (5xx) or down.

use std::time::Duration;

use crate::common::proxy::Proxy;
use crate::common::{self, Backend, SmtpMode};
use crate::for_each_backend;
use crate::harness;

for_each_backend!(
    smtp_refusing_with_4xx_then_recovering_delivers_every_reminder_once_on_later_ticks,
    smtp_rejecting_with_5xx_is_final_and_never_retried,
    smtp_down_entirely_is_retried_like_a_4xx_once_it_is_back,
);

async fn smtp_refusing_with_4xx_then_recovering_delivers_every_reminder_once_on_later_ticks(
    backend: Backend,
) {
    let world = harness::world_for(backend).await;
    common::insert_overdue(world.pool(), 200).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    let mut replicas = harness::spawn_replicas(&world, 2);

    common::wait_until(
        "every reminder failed once",
        Duration::from_secs(30),
        || async { harness::tally(&world).await.failed == 200 },
    )
    .await;
    assert_eq!(world.sink.count(), 0);
    world.sink.set_mode(SmtpMode::Accept);
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 200);
}

async fn smtp_rejecting_with_5xx_is_final_and_never_retried(backend: Backend) {
    let world = harness::world_for(backend).await;
    common::insert_overdue(world.pool(), 50).await;
    world.sink.set_mode(SmtpMode::Refuse5xx);
    let mut replicas = harness::spawn_replicas(&world, 2);

    common::wait_until(
        "every reminder was rejected",
        Duration::from_secs(30),
        || async { harness::tally(&world).await.discarded == 50 },
    )
    .await;
    world.sink.set_mode(SmtpMode::Accept);
    let runs_then: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs")
        .fetch_one(world.pool())
        .await
        .unwrap();
    common::wait_until("three more ticks ran", Duration::from_secs(30), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM job_runs WHERE finished_at IS NOT NULL")
            .fetch_one(world.pool())
            .await
            .unwrap()
            >= runs_then + 3
    })
    .await;
    harness::stop_all(&mut replicas).await;

    assert_eq!(world.sink.count(), 0, "a rejected reminder was retried");
    assert_eq!(world.sink.refused(), 50);
    let report = harness::assert_exactly_once(&world, 0).await;
    let discarded = report["failed"].as_array().unwrap();
    assert_eq!(discarded.len(), 50);
    assert!(
        discarded.iter().all(|f| f["status"] == "discarded"
            && f["last_error"].as_str().unwrap_or("").contains("554"))
    );
}

async fn smtp_down_entirely_is_retried_like_a_4xx_once_it_is_back(backend: Backend) {
    let mut world = harness::world_for(backend).await;
    let proxy = Proxy::start(world.sink.addr).await;
    world
        .set("smtp.port", proxy.port())
        .set("smtp.timeout", "1s");
    common::insert_overdue(world.pool(), 150).await;
    proxy.go_down();
    let mut replicas = harness::spawn_replicas(&world, 2);

    common::wait_until(
        "three ticks found SMTP down",
        Duration::from_secs(30),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM job_runs WHERE outcome = 'smtp_unavailable'",
            )
            .fetch_one(world.pool())
            .await
            .unwrap()
                >= 3
        },
    )
    .await;
    assert_eq!(world.sink.count(), 0);
    let attempts_used: i64 = sqlx::query_scalar("SELECT coalesce(sum(attempts), 0) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(
        attempts_used, 0,
        "an unreachable server must not use up attempts"
    );
    proxy.come_up().await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    harness::stop_all(&mut replicas).await;

    harness::assert_exactly_once(&world, 0).await;
    assert_eq!(world.sink.count(), 150);
}
