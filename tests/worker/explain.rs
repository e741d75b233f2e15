//! `explain --invoice ID --json` through the real binary: one test per
//! `reason`, each set up in the database (by a real tick where one can make
//! the state), and, where the tick can show it, the next tick doing what
//! the explanation said.

use chrono::{DateTime, Days, NaiveDate, Utc};
use invoice_reminder::tick::run_tick;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{self, SmtpMode, World, cli, stdout};

/// `explain --invoice <id> --json`: the exit code and the parsed object.
async fn explain(world: &World, id: i64) -> (Option<i32>, Value) {
    let out = cli(world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain printed no JSON ({e}): {}\nstderr: {}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), value)
}

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

async fn due_date(world: &World, id: i64) -> NaiveDate {
    sqlx::query_scalar("SELECT due_date FROM invoices WHERE id = $1")
        .bind(id)
        .fetch_one(world.pool())
        .await
        .unwrap()
}

fn date(v: &Value) -> NaiveDate {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a date: {v}"))
}

fn plus(d: NaiveDate, days: u64) -> NaiveDate {
    d.checked_add_days(Days::new(days)).unwrap()
}

fn minus(d: NaiveDate, days: u64) -> NaiveDate {
    d.checked_sub_days(Days::new(days)).unwrap()
}

async fn status_of(world: &World, id: i64, step: &str) -> Option<String> {
    sqlx::query_scalar("SELECT status FROM reminders WHERE invoice_id = $1::text AND period = $2")
        .bind(id)
        .bind(step)
        .fetch_optional(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_invoice_whose_address_does_not_parse_is_a_source_problem() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "not an address", 10, false).await;

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "source_problem", "{e}");
    assert_eq!(e["source_problem"], "bad_address", "{e}");
    assert_eq!(e["source"]["email"], "not an address", "{e}");
    assert_eq!(e["next_step"], Value::Null, "{e}");
}

#[tokio::test]
async fn a_paid_invoice_is_explained_as_paid_with_nothing_next() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, true).await;

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "paid", "{e}");
    assert_eq!(e["paid"], true, "{e}");
    assert_eq!(e["next_date"], Value::Null, "{e}");
}

#[tokio::test]
async fn an_invoice_paused_until_a_later_day_is_paused_until_then_and_reminded_the_day_after() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    sqlx::query("UPDATE invoices SET reminders_paused_until = due_date + 15 WHERE id = $1")
        .bind(id)
        .execute(world.pool())
        .await
        .unwrap();
    let paused_until = plus(due_date(&world, id).await, 15);

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "paused", "{e}");
    assert_eq!(date(&e["until"]), paused_until, "{e}");
    assert_eq!(e["next_step"], "overdue", "{e}");
    assert_eq!(date(&e["next_date"]), plus(paused_until, 1), "{e}");
}

#[tokio::test]
async fn an_invoice_before_its_first_step_is_not_due_until_that_steps_date() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", -10, false).await;
    let first = minus(due_date(&world, id).await, 3);

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "not_due_until", "{e}");
    assert_eq!(date(&e["until"]), first, "{e}");
    assert_eq!(e["due_step_today"], Value::Null, "{e}");
    assert_eq!(e["next_step"], "upcoming", "{e}");
    assert_eq!(date(&e["next_date"]), first, "{e}");
}

#[tokio::test]
async fn an_invoice_whose_last_step_was_sent_has_no_more_steps() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 60, false).await;
    tick(&world).await;
    assert_eq!(
        status_of(&world, id, "final-3").await.as_deref(),
        Some("sent")
    );

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "no_more_steps", "{e}");
    assert_eq!(e["due_step_today"], "final-3", "{e}");
    assert_eq!(e["next_step"], Value::Null, "{e}");
}

#[tokio::test]
async fn an_invoice_whose_due_step_was_sent_names_the_next_step_and_its_date() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    tick(&world).await;

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "sent", "{e}");
    assert_eq!(e["reminders"][0]["step"], "overdue", "{e}");
    assert_eq!(e["reminders"][0]["status"], "sent", "{e}");
    assert!(e["reminders"][0]["message_id"].is_string(), "{e}");
    assert_eq!(e["next_step"], "final", "{e}");
    assert_eq!(
        date(&e["next_date"]),
        plus(due_date(&world, id).await, 21),
        "{e}"
    );
}

#[tokio::test]
async fn a_due_step_started_by_a_run_that_ended_without_a_result_is_an_unknown_delivery() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    tick(&world).await;
    // As if the process had died after handing the mail over.
    sqlx::query(
        "UPDATE reminders SET status = 'sending', sent_at = NULL WHERE invoice_id = $1::text",
    )
    .bind(id)
    .execute(world.pool())
    .await
    .unwrap();

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "unknown_delivery", "{e}");
    assert_eq!(e["reminders"][0]["state"], "unknown", "{e}");
    assert!(e["reminders"][0]["replica"].is_string(), "{e}");
    assert_eq!(e["next_step"], "final", "{e}");
}

#[tokio::test]
async fn a_failed_due_step_out_of_attempts_is_exhausted_and_the_next_tick_discards_it() {
    let mut world = World::new().await;
    world.set("reminders.max_attempts", 2);
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    assert_eq!(
        status_of(&world, id, "overdue").await.as_deref(),
        Some("failed")
    );
    // The operator lowers max_attempts: the one attempt made uses them up.
    world.set("reminders.max_attempts", 1);

    let (code, e) = explain(&world, id).await;
    tick(&world).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "attempts_exhausted", "{e}");
    assert_eq!(e["next_step"], "final", "{e}");
    assert_eq!(
        status_of(&world, id, "overdue").await.as_deref(),
        Some("discarded")
    );
}

#[tokio::test]
async fn a_failed_step_no_longer_due_is_superseded_and_the_next_tick_sends_the_due_one() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    common::age_invoices(world.pool(), 15).await;
    world.sink.set_mode(SmtpMode::Accept);

    let (code, e) = explain(&world, id).await;
    tick(&world).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "superseded", "{e}");
    assert_eq!(e["due_step_today"], "final", "{e}");
    assert_eq!(e["next_step"], "final", "{e}");
    assert_eq!(e["next_date"], e["today"], "{e}");
    assert_eq!(
        status_of(&world, id, "overdue").await.as_deref(),
        Some("discarded")
    );
    assert_eq!(
        status_of(&world, id, "final").await.as_deref(),
        Some("sent")
    );
}

#[tokio::test]
async fn a_failed_due_step_waits_for_its_backoff_from_the_last_attempt() {
    let mut world = World::new().await;
    world.set("reminders.retry_backoff", "1h");
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    let last_attempt: DateTime<Utc> =
        sqlx::query_scalar("SELECT last_attempt_at FROM reminders WHERE invoice_id = $1::text")
            .bind(id)
            .fetch_one(world.pool())
            .await
            .unwrap();

    let (code, e) = explain(&world, id).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "backoff_until", "{e}");
    let until: DateTime<Utc> = e["until"].as_str().unwrap().parse().unwrap();
    assert_eq!(until, last_attempt + chrono::TimeDelta::hours(1), "{e}");
    assert_eq!(e["next_step"], "overdue", "{e}");
    assert_eq!(e["reminders"][0]["attempts"], 1, "{e}");
}

#[tokio::test]
async fn a_step_due_within_min_days_between_of_the_last_reminder_waits_for_the_gap() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", -2, false).await;
    tick(&world).await;
    world.wait_for_mails(1).await;
    // Three days later by the due dates: `overdue` is due, `upcoming` was
    // sent "today", and min_days_between is 2.
    common::age_invoices(world.pool(), 5).await;

    let (code, e) = explain(&world, id).await;
    tick(&world).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "min_gap_until", "{e}");
    let today = date(&e["today"]);
    assert_eq!(date(&e["until"]), plus(today, 2), "{e}");
    assert_eq!(e["next_step"], "overdue", "{e}");
    assert_eq!(date(&e["next_date"]), plus(today, 2), "{e}");
    assert_eq!(
        status_of(&world, id, "overdue").await,
        None,
        "the tick agrees"
    );
}

#[tokio::test]
async fn an_owed_invoice_without_a_reminder_will_be_sent_today_and_the_tick_sends_it() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;

    let (code, e) = explain(&world, id).await;
    tick(&world).await;

    assert_eq!(code, Some(0), "{e}");
    assert_eq!(e["reason"], "will_send_today", "{e}");
    assert_eq!(e["due_step_today"], "overdue", "{e}");
    assert_eq!(e["days_overdue"], 10, "{e}");
    assert_eq!(e["next_step"], "overdue", "{e}");
    assert_eq!(e["next_date"], e["today"], "{e}");
    assert_eq!(e["stages"].as_array().map(Vec::len), Some(5), "{e}");
    assert_eq!(
        status_of(&world, id, "overdue").await.as_deref(),
        Some("sent")
    );
}

#[tokio::test]
async fn explain_exits_1_for_an_invoice_neither_in_the_source_nor_reminded() {
    let world = World::new().await;

    let (code, e) = explain(&world, 424242).await;

    assert_eq!(code, Some(1), "{e}");
    assert_eq!(e["source_problem"], "not_in_source", "{e}");
}

#[tokio::test]
async fn explain_by_customer_without_a_customer_id_column_is_a_usage_error() {
    let mut world = World::new().await;
    // A source of the invoice-mode contract only (the default view has a
    // customer_id since customer mode).
    sqlx::raw_sql(
        "CREATE VIEW public.no_customer AS
         SELECT invoice_id, invoice_number, customer_name, email, locale, amount_minor,
                currency, due_date, is_paid, paused, paused_until, payment_url
           FROM invoice_reminder.reminder_source",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "public.no_customer");

    let out = cli(&world, &["explain", "--customer", "7", "--json"]).await;

    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("customer_id"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn explain_by_customer_lists_each_of_the_customers_invoices() {
    let mut world = World::new().await;
    sqlx::raw_sql(
        "CREATE VIEW public.by_customer AS
         SELECT s.* FROM invoice_reminder.reminder_source s",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "public.by_customer");
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    let customer: i64 = sqlx::query_scalar("SELECT customer_id FROM invoices WHERE id = $1")
        .bind(id)
        .fetch_one(world.pool())
        .await
        .unwrap();

    let out = cli(
        &world,
        &["explain", "--customer", &customer.to_string(), "--json"],
    )
    .await;

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["invoices"][0]["invoice_id"], id.to_string());
    assert_eq!(report["invoices"][0]["reason"], "will_send_today");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn explain_shows_the_servers_reply_and_hash_and_raw_prints_the_archived_message() {
    use sha2::Digest as _;
    let mut world = World::new().await;
    world.set("archive.store", "database");
    let id = common::insert_invoice(world.pool(), "Proof", "proof@example.test", 10, false).await;
    tick(&world).await;
    let received = world.sink.received();
    assert_eq!(received.len(), 1);
    let sent_hash = hex(&sha2::Sha256::digest(received[0].raw.as_bytes()));

    let (code, e) = explain(&world, id).await;
    assert_eq!(code, Some(0), "{e}");
    let row = &e["reminders"][0];
    assert!(
        row["smtp_reply"]
            .as_str()
            .is_some_and(|r| r.starts_with("250")),
        "{row}"
    );
    assert_eq!(
        row["message_sha256"].as_str(),
        Some(sent_hash.as_str()),
        "{row}"
    );

    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--raw"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        hex(&sha2::Sha256::digest(&out.stdout)),
        sent_hash,
        "--raw prints the bytes sent"
    );
}

#[tokio::test]
async fn suppressed_when_every_recipient_is_on_the_suppression_list() {
    let world = World::new().await;
    let id = common::insert_invoice(world.pool(), "Gone", "gone@example.test", 10, false).await;
    let out = cli(
        &world,
        &["suppress", "add", "Gone@Example.test", "--reason", "left"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (_, before) = explain(&world, id).await;
    assert_eq!(before["reason"], "suppressed", "{before}");
    assert_eq!(before["suppressed"][0]["reason"], "left", "{before}");

    tick(&world).await;
    assert_eq!(world.sink.count(), 0);
    let (_, after) = explain(&world, id).await;
    assert_eq!(after["reason"], "suppressed", "{after}");
    assert_eq!(after["reminders"][0]["state"], "skipped", "{after}");
}
