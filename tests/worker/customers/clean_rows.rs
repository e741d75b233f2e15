//! Rows that cannot be mailed (a key repeated in the view, a row that fails
//! its check, every address suppressed) take no place in a customer's
//! statement: its clean invoices are mailed in the same tick.

use super::{customer_with, listed, tick, world_in_customer_mode};
use crate::common::{self, World};

/// The demo view, plus a table whose rows the view repeats: a key put
/// there is on two rows of the source.
async fn with_repeatable_view(world: &mut World) {
    sqlx::raw_sql(
        "CREATE TABLE repeated_rows AS SELECT * FROM reminder_source LIMIT 0;
         CREATE VIEW repeating_source AS
           SELECT * FROM reminder_source UNION ALL SELECT * FROM repeated_rows;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "repeating_source");
}

async fn repeat(world: &World, invoice: i64) {
    sqlx::query(
        "INSERT INTO repeated_rows SELECT * FROM reminder_source WHERE invoice_id = $1::text",
    )
    .bind(invoice)
    .execute(world.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn a_clean_invoice_beside_two_repeated_key_invoices_of_its_customer_is_mailed_in_the_first_tick()
 {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.max_invoices_per_mail", 1);
    with_repeatable_view(&mut world).await;
    // The two repeated ones are older: they come first in the customer's
    // order, and used to take the statement's one place.
    let (_, invoices) = customer_with(world.pool(), "Rep", &[12, 11, 10]).await;
    repeat(&world, invoices[0]).await;
    repeat(&world, invoices[1]).await;

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1, "one statement");
    assert_eq!(listed(&mails[0]), vec![invoices[2]]);
    let out = common::cli(&world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut problems: Vec<String> = report["source_problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} {}",
                p["invoice_id"].as_str().unwrap_or("?"),
                p["problem"]
            )
        })
        .collect();
    problems.sort();
    assert_eq!(
        problems,
        vec![
            format!("{} \"repeated_key\"", invoices[0]),
            format!("{} \"repeated_key\"", invoices[1])
        ]
    );
}

#[tokio::test]
async fn a_broken_row_and_a_suppressed_address_take_no_place_in_a_customers_statement() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.max_invoices_per_mail", 1);
    let (_, invoices) = customer_with(world.pool(), "Mixed", &[14, 13, 12]).await;
    // The oldest has a currency no mail can show.
    sqlx::query("UPDATE invoices SET currency = 'XYZ' WHERE id = $1")
        .bind(invoices[0])
        .execute(world.pool())
        .await
        .unwrap();
    // The next one goes to an address of its own, which is suppressed.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE VIEW own_addresses AS SELECT s.invoice_id, s.invoice_number, s.customer_name,
                CASE WHEN s.invoice_id = '{second}' THEN 'gone@example.test' ELSE s.email END AS email,
                s.locale, s.amount_minor, s.currency, s.due_date, s.is_paid, s.paused,
                s.paused_until, s.payment_url, s.customer_id
           FROM reminder_source s",
        second = invoices[1]
    )))
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "own_addresses");
    let out = common::cli(&world, &["suppress", "add", "gone@example.test"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stdout(&out));

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    assert_eq!(listed(&mails[0]), vec![invoices[2]], "the clean one");
    let skipped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reminders WHERE invoice_id = $1::text AND status = 'skipped'",
    )
    .bind(invoices[1])
    .fetch_one(world.pool())
    .await
    .unwrap();
    assert_eq!(skipped, 1, "the suppressed one is recorded skipped");
}
