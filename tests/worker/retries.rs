//! Retries: a failed reminder waits for its backoff, a failure on the last
//! attempt and rows out of attempts are discarded (and counted so), and an
//! unknown result recorded twice counts its attempt once.

use invoice_reminder::db;
use invoice_reminder::domain::{Attempted, Delivery, InvoiceId, ReminderId};
use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, SmtpMode, World};

#[tokio::test]
async fn a_failed_reminder_waits_for_its_backoff_before_the_next_attempt() {
    let mut world = World::new().await;
    world
        .set("reminders.retry_backoff", "1h")
        .set("reminders.retry_backoff_max", "6h");
    common::insert_overdue(world.pool(), 3).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    world.sink.set_mode(SmtpMode::Accept);

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let during_backoff = world.sink.count();
    sqlx::query("UPDATE reminders SET last_attempt_at = last_attempt_at - interval '61 minutes'")
        .execute(world.pool())
        .await
        .unwrap();
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(during_backoff, 0, "retried before its backoff was over");
    assert_eq!(world.sink.count(), 3);
}

#[tokio::test]
async fn a_retry_that_goes_back_unattempted_keeps_its_backoff_clock_where_it_was() {
    let mut world = World::new().await;
    world.set("reminders.retry_backoff", "1h");
    common::insert_overdue(world.pool(), 2).await;
    let up = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    run_tick(&up, &CancellationToken::new()).await.unwrap();
    world.sink.set_mode(SmtpMode::Accept);
    let due: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "UPDATE reminders SET last_attempt_at = last_attempt_at - interval '61 minutes'
         RETURNING last_attempt_at",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    // The relay is down for one tick: the retries are marked, never sent.
    let closed = common::closed_port::ClosedPort::new();
    world.set("smtp.port", closed.port);
    let down = world.context().await;

    run_tick(&down, &CancellationToken::new()).await.unwrap();

    let after: Vec<(chrono::DateTime<chrono::Utc>, i32)> =
        sqlx::query_as("SELECT last_attempt_at, attempts FROM reminders ORDER BY id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(
        after.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        due,
        "the backoff clock is where the last real attempt left it"
    );
    assert!(after.iter().all(|(_, attempts)| *attempts == 1));
    run_tick(&up, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.count(), 2, "still due: sent on the next tick");
}

#[tokio::test]
async fn a_transient_refusal_on_the_last_attempt_is_counted_discarded_as_it_is_written() {
    let mut world = World::new().await;
    world.set("reminders.max_attempts", 1);
    common::insert_overdue(world.pool(), 2).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let counts = outcome.summary().cloned().unwrap().counts;
    assert_eq!((counts.failed, counts.discarded), (0, 2), "{counts:?}");
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM reminders")
        .fetch_all(world.pool())
        .await
        .unwrap();
    assert_eq!(statuses, ["discarded", "discarded"]);
}

#[tokio::test]
async fn rows_out_of_attempts_after_max_attempts_is_lowered_are_discarded_with_the_reason() {
    let mut world = World::new().await;
    common::insert_overdue(world.pool(), 2).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    for _ in 0..3 {
        let ctx = world.context().await;
        run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    }
    world.set("reminders.max_attempts", 2);
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT status, last_error FROM reminders ORDER BY id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    for (status, error) in rows {
        assert_eq!(status, "discarded");
        assert!(
            error
                .as_deref()
                .unwrap_or("")
                .contains("reminders.max_attempts = 2"),
            "{error:?}"
        );
    }
}

#[tokio::test]
async fn recording_one_unknown_result_twice_counts_the_attempt_once() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 1).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let (id, run, period, invoice): (i64, i64, String, i64) = sqlx::query_as(
        "UPDATE reminders SET status = 'sending' RETURNING id, run_id, period, invoice_id::bigint",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    let unknown = Attempted {
        id: ReminderId(id),
        invoice: InvoiceId::from(invoice),
        step: period.into(),
        attempts_before: 1,
        message_id: "m@test".into(),
        delivery: Delivery::Unknown {
            error: "no reply".into(),
        },
    };

    for _ in 0..2 {
        db::deliveries::record_deliveries(
            &world.database(),
            run,
            5,
            std::slice::from_ref(&unknown),
        )
        .await
        .unwrap();
    }

    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(
        attempts, 2,
        "one earlier attempt plus this one, counted once"
    );
}
