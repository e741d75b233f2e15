//! The suppression list: the `suppress` commands, a tick that records a
//! reminder to suppressed recipients `skipped` (never sent, counted in the
//! summary and `/metrics`, listed by `audit`), and a cell of several
//! addresses whose suppressed ones are left out of `To`, and a real
//! Postfix rejecting an address for good (which puts it on the list).

use invoice_reminder::tick::{Summary, TickOutcome, run_tick};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::postfix::{Postfix, PostfixOptions};
use crate::common::{self, World, cli, stdout};

async fn tick(world: &World) -> (Summary, String) {
    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let TickOutcome::Done(summary) = outcome else {
        panic!("expected Done, got {outcome:?}");
    };
    (summary, ctx.metrics.encode().unwrap())
}

async fn suppress(world: &World, address: &str) {
    let out = cli(world, &["suppress", "add", address, "--reason", "asked us"]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

async fn row(
    world: &World,
    invoice: i64,
) -> (
    String,
    Option<String>,
    i32,
    Option<chrono::DateTime<chrono::Utc>>,
) {
    sqlx::query_as(
        "SELECT status, last_error, attempts, started_at FROM reminders WHERE invoice_id = $1::text",
    )
    .bind(invoice)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn suppress_add_list_and_remove_work_on_addresses_in_any_case() {
    let world = World::new().await;

    let added = cli(
        &world,
        &[
            "suppress",
            "add",
            "Ada@Example.com",
            "--reason",
            "moved away",
        ],
    )
    .await;
    let again = cli(&world, &["suppress", "add", "ada@example.COM"]).await;
    let bad = cli(&world, &["suppress", "add", "not an address"]).await;
    let listed = cli(&world, &["suppress", "list", "--json"]).await;
    let text = cli(&world, &["suppress", "list"]).await;
    let removed = cli(&world, &["suppress", "remove", "ADA@example.com"]).await;
    let after = cli(&world, &["suppress", "list", "--json"]).await;

    assert_eq!(added.status.code(), Some(0), "{added:?}");
    assert!(stdout(&added).contains("suppressed Ada@Example.com (moved away)"));
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    assert!(
        stdout(&again).contains("already suppressed"),
        "{}",
        stdout(&again)
    );
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let list: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let list = list.as_array().expect("a JSON array");
    assert_eq!(
        list.len(),
        1,
        "one entry per address, whatever its case: {list:?}"
    );
    assert_eq!(list[0]["address"], "Ada@Example.com");
    assert_eq!(list[0]["reason"], "manual");
    assert_eq!(list[0]["source"], "cli");
    assert!(list[0]["suppressed_at"].is_string());
    assert!(
        stdout(&text).contains("Ada@Example.com  manual  cli"),
        "{}",
        stdout(&text)
    );
    assert_eq!(removed.status.code(), Some(0), "{removed:?}");
    assert!(stdout(&removed).contains("no longer suppressed"));
    let after: Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(after, serde_json::json!([]));
}

#[tokio::test]
async fn a_reminder_whose_every_recipient_is_suppressed_is_recorded_skipped_and_never_sent() {
    let world = World::new().await;
    let blocked =
        common::insert_invoice(world.pool(), "Blocked", "gone@example.test", 10, false).await;
    let fine = common::insert_invoice(world.pool(), "Fine", "fine@example.test", 10, false).await;
    suppress(&world, "GONE@example.test").await;

    let (summary, metrics) = tick(&world).await;
    let (second, _) = tick(&world).await;

    assert_eq!(world.sink.invoice_ids(), vec![fine]);
    assert_eq!(summary.counts.sent, 1);
    assert_eq!(summary.counts.suppressed, 1);
    assert_eq!(summary.counts.claimed, 2);
    let (status, reason, attempts, started) = row(&world, blocked).await;
    assert_eq!(status, "skipped");
    assert_eq!(reason.as_deref(), Some("suppressed"));
    assert_eq!(attempts, 0, "nothing was attempted");
    assert_eq!(started, None, "a skipped row is never marked started");
    assert!(
        metrics.contains("invoice_reminder_suppressed_total 1"),
        "{metrics}"
    );
    // The step keeps its claim: the next tick does not try it again.
    assert_eq!(second.counts.claimed, 0);
    assert_eq!(world.sink.count(), 1);
    let suppressed: i32 = sqlx::query_scalar("SELECT suppressed FROM job_runs WHERE id = $1")
        .bind(summary.run_id)
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(suppressed, 1);
}

#[tokio::test]
async fn suppressed_addresses_are_left_out_of_to_when_a_cell_holds_several() {
    let world = World::new().await;
    let invoice = common::insert_invoice(
        world.pool(),
        "Two Contacts",
        "ap@example.test, Boss@Example.test, clerk@example.test",
        10,
        false,
    )
    .await;
    suppress(&world, "boss@example.test").await;

    let (summary, _) = tick(&world).await;

    assert_eq!(summary.counts.sent, 1);
    assert_eq!(summary.counts.suppressed, 0);
    let mail = world.sink.received();
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].invoice_id(), Some(invoice));
    let mut rcpt: Vec<String> = mail[0].to.iter().map(|a| a.to_lowercase()).collect();
    rcpt.sort();
    assert_eq!(rcpt, vec!["ap@example.test", "clerk@example.test"]);
    let to = mail[0].header("To").unwrap_or_default().to_lowercase();
    assert!(
        to.contains("ap@example.test") && to.contains("clerk@example.test"),
        "{to}"
    );
    assert!(!to.contains("boss@example.test"), "{to}");
    assert_eq!(row(&world, invoice).await.0, "sent");
}

#[tokio::test]
async fn a_failed_reminder_to_an_address_suppressed_meanwhile_is_skipped_on_its_retry() {
    let world = World::new().await;
    let invoice =
        common::insert_invoice(world.pool(), "Later", "later@example.test", 10, false).await;
    world.sink.set_mode(common::SmtpMode::Refuse4xx);
    tick(&world).await;
    assert_eq!(row(&world, invoice).await.0, "failed");
    world.sink.set_mode(common::SmtpMode::Accept);
    suppress(&world, "later@example.test").await;
    let accepted_before = world.sink.count();

    let (summary, _) = tick(&world).await;

    assert_eq!(summary.counts.suppressed, 1);
    assert_eq!(
        world.sink.count(),
        accepted_before,
        "no mail after the suppression"
    );
    let (status, reason, attempts, _) = row(&world, invoice).await;
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("skipped", Some("suppressed"))
    );
    assert_eq!(attempts, 1, "the skip uses no attempt");
}

#[tokio::test]
async fn audit_lists_skipped_reminders_and_counts_them_neither_missing_nor_duplicates() {
    let world = World::new().await;
    let blocked =
        common::insert_invoice(world.pool(), "Blocked", "gone@example.test", 10, false).await;
    suppress(&world, "gone@example.test").await;
    tick(&world).await;

    let out = cli(&world, &["audit", "--json"]).await;
    let text = cli(&world, &["audit"]).await;

    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["skipped_count"], 1, "{report}");
    assert_eq!(report["skipped"][0]["invoice_id"], blocked.to_string());
    assert_eq!(report["skipped"][0]["period"], "overdue");
    assert_eq!(report["skipped"][0]["reason"], "suppressed");
    assert_eq!(report["missing_count"], 0, "{report}");
    assert_eq!(report["duplicates"], serde_json::json!([]));
    assert_eq!(report["counts"]["skipped"], 1, "{report}");
    assert!(
        stdout(&text).contains(&format!("invoice {blocked} overdue: suppressed")),
        "{}",
        stdout(&text)
    );
}

#[tokio::test]
async fn an_address_postfix_rejects_for_good_goes_on_the_suppression_list_and_its_later_steps_are_skipped()
 {
    let mut world = World::new().await;
    let postfix = Postfix::start(
        world.sink.port(),
        PostfixOptions {
            reject_domain: Some("gone.test"),
            ..PostfixOptions::default()
        },
    )
    .await;
    world
        .set("smtp.port", postfix.port)
        .set("reminders.min_days_between", 0);
    let gone = common::insert_invoice(world.pool(), "Gone", "ada@gone.test", 10, false).await;
    common::insert_invoice(world.pool(), "Here", "bob@example.test", 10, false).await;
    let steps = async |world: &World| -> Vec<(String, String)> {
        sqlx::query_as(
            "SELECT period, status FROM reminders WHERE invoice_id = $1::text ORDER BY id",
        )
        .bind(gone)
        .fetch_all(world.pool())
        .await
        .unwrap()
    };

    let (first, _) = tick(&world).await;
    world.wait_for_mails(1).await;
    let listed = cli(&world, &["suppress", "list", "--json"]).await;

    assert_eq!((first.counts.sent, first.counts.discarded), (1, 1));
    assert_eq!(
        steps(&world).await,
        [("overdue".to_owned(), "discarded".to_owned())]
    );
    let list: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let entry = &list[0];
    assert_eq!(entry["address"], "ada@gone.test", "{list}");
    assert_eq!(entry["source"], "relay", "{list}");
    assert!(
        entry["reason"].as_str().unwrap_or("").contains("5.1.2"),
        "the relay's reply is the reason: {list}"
    );

    common::age_invoices(world.pool(), 15).await;
    let (second, _) = tick(&world).await;

    assert_eq!(second.counts.suppressed, 1, "{second:?}");
    assert_eq!(
        steps(&world).await,
        [
            ("overdue".to_owned(), "discarded".to_owned()),
            ("final".to_owned(), "skipped".to_owned())
        ]
    );
    let removed = cli(&world, &["suppress", "remove", "ada@gone.test"]).await;
    assert_eq!(removed.status.code(), Some(0), "{removed:?}");
    let after = cli(&world, &["suppress", "list", "--json"]).await;
    assert_eq!(stdout(&after).trim(), "[]");
}
