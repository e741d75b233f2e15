//! What reaches the SMTP server, and what happens when it says no.

use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use redis::AsyncCommands as _;
use tokio_util::sync::CancellationToken;

use crate::common::proxy::Proxy;
use crate::common::{self, SmtpMode, World};

#[tokio::test]
async fn each_reminder_carries_a_deterministic_message_id_and_invoice_headers() {
    let mut world = World::new().await;
    world.set("smtp.message_id_domain", "mail.test");
    let id =
        common::insert_invoice(world.pool(), "Ada Lovelace", "ada@example.test", 12, false).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    // 12 days past due: the default stages' "overdue" step.
    let period = "overdue";
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    assert_eq!(
        mail.header("Message-ID"),
        Some(format!("<invoice-{id}.{period}@mail.test>").as_str())
    );
    assert_eq!(mail.header("X-Invoice-Id"), Some(id.to_string().as_str()));
    assert_eq!(mail.header("X-Reminder-Period"), Some(period));
    assert_eq!(mail.to, vec!["ada@example.test".to_owned()]);
    assert!(mail.body.contains("INV-X-"), "{}", mail.body);
    assert!(mail.body.contains("50.00 EUR"), "{}", mail.body);
    assert!(mail.body.contains("12 days overdue"), "{}", mail.body);
    let stored: Option<String> =
        sqlx::query_scalar("SELECT message_id FROM reminders WHERE invoice_id = $1::text")
            .bind(id)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(stored, Some(format!("invoice-{id}.{period}@mail.test")));
}

#[tokio::test]
async fn a_customer_name_with_line_breaks_cannot_inject_headers() {
    let world = World::new().await;
    common::insert_invoice(
        world.pool(),
        "Mallory\r\nBcc: victim@evil.test\r\nX-Injected: yes",
        "mallory@example.test",
        5,
        false,
    )
    .await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    assert_eq!(mail.header("Bcc"), None, "{}", mail.raw);
    assert_eq!(mail.header("X-Injected"), None, "{}", mail.raw);
    assert_eq!(mail.to, vec!["mallory@example.test".to_owned()]);
    assert!(
        mail.headers.iter().all(|(name, _)| !name.contains(' ')),
        "{:?}",
        mail.headers
    );
}

#[tokio::test]
async fn an_invalid_address_is_skipped_as_a_source_problem_and_the_others_still_go_out() {
    let world = World::new().await;
    let bad = common::insert_invoice(world.pool(), "No Mail", "not-an-address", 5, false).await;
    let empty = common::insert_invoice(world.pool(), "Empty", "", 5, false).await;
    let good = common::insert_invoice(world.pool(), "Good", "good@example.test", 5, false).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(world.sink.invoice_ids(), vec![good]);
    let summary = outcome.summary().cloned().unwrap();
    assert_eq!(summary.counts.source_problems, 2, "{summary:?}");
    // Skipped, not claimed: once the address is fixed it is reminded.
    let rows: Vec<i64> = sqlx::query_scalar("SELECT invoice_id::bigint FROM reminders ORDER BY 1")
        .fetch_all(world.pool())
        .await
        .unwrap();
    assert_eq!(rows, vec![good]);
    let audit = common::cli(&world, &["audit"]).await;
    let text = common::stdout(&audit);
    for id in [bad, empty] {
        assert!(
            text.contains(&format!("invoice {id}: bad_address")),
            "{text}"
        );
    }
    assert!(text.contains("no email address"), "{text}");
    sqlx::query("UPDATE customers SET email = 'fixed@example.test' WHERE name = 'Empty'")
        .execute(world.pool())
        .await
        .unwrap();
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.invoice_ids(), vec![good, empty]);
}

#[tokio::test]
async fn a_4xx_is_retried_on_a_later_tick_and_delivered_once() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 5).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);

    let first = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(
        first.summary().map(|s| (s.counts.sent, s.counts.failed)),
        Some((0, 5))
    );
    assert_eq!(common::count_status(world.pool(), "failed").await, 5);
    // Retried once per tick, not in a loop within the tick.
    assert_eq!(world.sink.refused(), 5);

    world.sink.set_mode(SmtpMode::Accept);
    let second = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(second.summary().map(|s| s.counts.sent), Some(5));
    assert_eq!(common::count_status(world.pool(), "sent").await, 5);
    assert_eq!(world.sink.count(), 5);
    common::assert_no_duplicate_mail(&world.sink);
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempts FROM reminders")
        .fetch_all(world.pool())
        .await
        .unwrap();
    assert!(attempts.iter().all(|&a| a == 2), "{attempts:?}");
}

#[tokio::test]
async fn a_5xx_is_final_and_never_retried() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 3).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse5xx);

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    world.sink.set_mode(SmtpMode::Accept);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(common::count_status(world.pool(), "discarded").await, 3);
    assert_eq!(world.sink.count(), 0);
    assert_eq!(world.sink.refused(), 3);
}

#[tokio::test]
async fn a_reminder_that_keeps_failing_is_discarded_after_max_attempts() {
    let mut world = World::new().await;
    world.set("reminders.max_attempts", 2);
    common::insert_overdue(world.pool(), 1).await;
    let ctx = world.context().await;
    world.sink.set_mode(SmtpMode::Refuse4xx);

    for _ in 0..4 {
        run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    }

    assert_eq!(world.sink.refused(), 2);
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error FROM reminders")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(status, "discarded");
    assert!(error.unwrap().starts_with("gave up after 2 attempts"));
}

#[tokio::test]
async fn an_unreachable_smtp_server_fails_what_was_tried_hands_back_the_rest_and_uses_no_attempt() {
    let mut world = World::new().await;
    let proxy = Proxy::start(world.sink.addr).await;
    world
        .set("smtp.port", proxy.port())
        .set("reminders.send_concurrency", 1);
    common::insert_overdue(world.pool(), 10).await;
    let ctx = world.context().await;
    proxy.go_down();

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let TickOutcome::SmtpUnavailable(summary) = outcome else {
        panic!("expected SmtpUnavailable, got {outcome:?}");
    };
    assert_eq!(summary.counts.sent, 0);
    assert_eq!(summary.counts.failed, 1);
    assert_eq!(summary.counts.handed_back, 9);
    assert_eq!(common::count_status(world.pool(), "failed").await, 1);
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(
        attempts, 0,
        "a refused connection is not a delivery attempt"
    );

    proxy.come_up().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.count(), 10);
    assert_eq!(common::count_status(world.pool(), "sent").await, 10);
    common::assert_no_duplicate_mail(&world.sink);
}

#[tokio::test]
async fn a_reminder_that_never_used_an_attempt_goes_out_on_the_next_tick_whatever_the_backoff() {
    let mut world = World::new().await;
    let proxy = Proxy::start(world.sink.addr).await;
    world
        .set("smtp.port", proxy.port())
        .set("reminders.send_concurrency", 1)
        .set("reminders.retry_backoff", "1h");
    common::insert_overdue(world.pool(), 3).await;
    let ctx = world.context().await;
    proxy.go_down();
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let waiting: Vec<(String, i32)> = sqlx::query_as("SELECT status, attempts FROM reminders")
        .fetch_all(world.pool())
        .await
        .unwrap();
    assert_eq!(waiting, [("failed".to_owned(), 0)], "tried, never reached");

    proxy.come_up().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(outcome.summary().map(|s| s.counts.sent), Some(3));
    assert_eq!(world.sink.count(), 3);
    assert_eq!(common::count_status(world.pool(), "sent").await, 3);
}

#[tokio::test]
async fn a_send_cut_off_after_the_message_was_handed_over_stays_sending_and_is_never_resent() {
    let mut world = World::new().await;
    world.set("smtp.timeout", "300ms");
    common::insert_overdue(world.pool(), 1).await;
    let ctx = world.context().await;
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(1500)));

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(outcome.summary().map(|s| s.counts.unknown), Some(1));
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error FROM reminders")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(status, "sending");
    assert!(error.unwrap().contains("delivery unknown"));
    // The server did accept it in the end: exactly the case we must not repeat.
    common::wait_until(
        "the slow server accepts",
        Duration::from_secs(5),
        || async { world.sink.count() == 1 },
    )
    .await;
    world.sink.set_mode(SmtpMode::Accept);
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert_eq!(world.sink.count(), 1);
    let desk = invoice_reminder::operator::desk::Desk::new(ctx.db.clone(), ctx.settings.clone());
    let report = desk.audit(Duration::from_secs(600)).await.unwrap();
    assert_eq!(report.unknown.len(), 1);
}

#[tokio::test]
async fn shutdown_mid_tick_finishes_the_mail_in_flight_and_hands_back_the_rest() {
    let mut world = World::new().await;
    world.set("reminders.send_concurrency", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    common::insert_overdue(world.pool(), 30).await;
    let ctx = world.context().await;
    let tick = common::spawn_tick(ctx);

    world.wait_for_mails(2).await;
    tick.stop.cancel();
    let outcome = tick.outcome().await;

    let TickOutcome::Shutdown(summary) = outcome else {
        panic!("expected Shutdown, got {outcome:?}");
    };
    assert_eq!(summary.counts.sent as usize, world.sink.count());
    assert!(summary.counts.sent < 30);
    assert_eq!(common::count_status(world.pool(), "sending").await, 0);
    assert_eq!(
        common::count_status(world.pool(), "sent").await as usize,
        world.sink.count()
    );
    let lock_left: bool = common::redis_conn()
        .await
        .exists(world.lock_key())
        .await
        .unwrap();
    assert!(!lock_left, "the lock is released");
}
