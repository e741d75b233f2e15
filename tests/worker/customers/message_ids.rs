//! The operator is told the Message-ID that was really sent: it is stored
//! on every row of a statement before the send, and `audit`, `explain` and
//! `resolve` read it; `resolve` settles a statement as a whole, and a
//! resent statement carries the same Message-ID.

use std::time::Duration;

use super::{customer_with, tick, world_in_customer_mode};
use crate::common::{self, SmtpMode, World};

/// A customer whose two-invoice statement the relay took while its reply
/// never came: the rows are unknown. Returns the invoices and the
/// Message-ID the relay received (without angle brackets).
async fn unknown_statement(world: &mut World) -> (Vec<i64>, String) {
    world.set("smtp.timeout", "300ms");
    let (_, invoices) = customer_with(world.pool(), "Lost", &[12, 10]).await;
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(1500)));
    tick(world).await;
    common::wait_until(
        "the slow relay takes it",
        Duration::from_secs(5),
        || async { world.sink.count() == 1 },
    )
    .await;
    world.sink.set_mode(SmtpMode::Accept);
    let received = world.sink.received()[0]
        .header("Message-ID")
        .unwrap_or_default()
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned();
    (invoices, received)
}

#[tokio::test]
async fn an_unknown_statements_rows_show_the_message_id_the_relay_received() {
    let mut world = world_in_customer_mode().await;
    let (invoices, received) = unknown_statement(&mut world).await;
    assert!(received.starts_with("statement-"), "{received}");

    let out = common::cli(&world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let unknown: Vec<&str> = report["unknown"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["message_id"].as_str())
        .collect();
    assert_eq!(
        unknown,
        vec![received.as_str(), received.as_str()],
        "{report}"
    );
    let mails = report["unknown_mails"].as_array().unwrap();
    assert_eq!(mails.len(), 1, "one mail: {report}");
    assert_eq!(mails[0]["reminder_ids"].as_array().map(Vec::len), Some(2));

    let out = common::cli(&world, &["explain", "--invoice", &invoices[0].to_string()]).await;
    let text = common::stdout(&out);
    assert!(text.contains(&format!("Message-ID <{received}>")), "{text}");

    // Settling one row settles the statement, under the Message-ID sent.
    let first: i64 = sqlx::query_scalar("SELECT min(id) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    let out = common::cli(&world, &["resolve", "--sent", &first.to_string()]).await;
    let text = common::stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("all of it is settled"), "{text}");
    let rows: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT status, message_id FROM reminders ORDER BY id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![("sent".to_owned(), Some(received.clone())); 2],
        "both rows sent, under the Message-ID the relay received"
    );
}

#[tokio::test]
async fn a_resent_statement_carries_the_same_message_id() {
    let mut world = world_in_customer_mode().await;
    let (invoices, received) = unknown_statement(&mut world).await;
    let first: i64 = sqlx::query_scalar("SELECT min(id) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    let out = common::cli(&world, &["resolve", "--resend", &first.to_string()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stdout(&out));

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 2, "sent again once");
    let again = mails[1].header("Message-ID").unwrap_or_default().trim();
    assert_eq!(again, format!("<{received}>"));
    assert_eq!(super::listed(&mails[1]), invoices);
}

#[tokio::test]
async fn a_resend_is_not_held_back_by_a_statement_sent_since() {
    let mut world = world_in_customer_mode().await; // min_days_between = 2
    world
        .set("reminders.max_invoices_per_mail", 1)
        .set("smtp.timeout", "300ms");
    let (_, invoices) = customer_with(world.pool(), "Twice", &[12, 10]).await;
    // The first statement's reply never comes: unknown.
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(1500)));
    tick(&world).await;
    common::wait_until(
        "the slow relay takes it",
        Duration::from_secs(5),
        || async { world.sink.count() == 1 },
    )
    .await;
    world.sink.set_mode(SmtpMode::Accept);
    let first = world.sink.received()[0]
        .header("Message-ID")
        .unwrap_or_default()
        .trim()
        .to_owned();
    // The rest of the round goes meanwhile, and ends it.
    tick(&world).await;
    assert_eq!(world.sink.count(), 2);
    // The operator finds the first mail was lost after all, and resends it.
    let unknown: i64 = sqlx::query_scalar(
        "SELECT id FROM reminders WHERE status = 'sending' AND started_at IS NOT NULL",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    let out = common::cli(&world, &["resolve", "--resend", &unknown.to_string()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stdout(&out));

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 3, "resent, though the gap holds new mail back");
    assert_eq!(
        mails[2].header("Message-ID").unwrap_or_default().trim(),
        first
    );
    assert_eq!(super::listed(&mails[2]), vec![invoices[0]]);
}
