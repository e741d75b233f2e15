//! Where a statement goes: to every distinct address among its invoices'
//! `email` cells, suppressed ones left out (docs/writing-reminders.md,
//! "One mail per customer").

use super::{customer_with, tick, world_in_customer_mode};
use crate::common;

#[tokio::test]
async fn a_statement_goes_to_every_distinct_address_of_its_invoices_but_the_suppressed() {
    let mut world = world_in_customer_mode().await;
    let (_, invoices) = customer_with(world.pool(), "Split", &[12, 11, 10]).await;
    // Each invoice names its own contacts.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE VIEW own_contacts AS SELECT s.invoice_id, s.invoice_number, s.customer_name,
                CASE s.invoice_id WHEN '{a}' THEN 'ap@split.test'
                                  WHEN '{b}' THEN 'AP@split.test, boss@split.test'
                                  ELSE 'gone@split.test, ap@split.test' END AS email,
                s.locale, s.amount_minor, s.currency, s.due_date, s.is_paid, s.paused,
                s.paused_until, s.payment_url, s.customer_id
           FROM reminder_source s",
        a = invoices[0],
        b = invoices[1]
    )))
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "own_contacts");
    let out = common::cli(&world, &["suppress", "add", "gone@split.test"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", common::stdout(&out));

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1, "one statement");
    let mut to: Vec<String> = mails[0].to.iter().map(|a| a.to_lowercase()).collect();
    to.sort();
    assert_eq!(to, vec!["ap@split.test", "boss@split.test"]);
    assert_eq!(super::listed(&mails[0]), invoices);
}
