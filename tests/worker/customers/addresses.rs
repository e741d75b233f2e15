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

/// One address of a statement that the relay rejects for good does not
/// cost the others their mail: a real Postfix refuses it at RCPT, takes
/// the statement for the rest, the address goes on the suppression list,
/// and `explain` tells each listed invoice who did not get it.
#[tokio::test]
async fn a_statement_with_one_rejected_address_still_reaches_the_others_and_explain_says_so() {
    use crate::common::postfix::{Postfix, PostfixOptions};
    let mut world = world_in_customer_mode().await;
    let postfix = Postfix::start(
        world.sink.port(),
        PostfixOptions {
            reject_domain: Some("gone.test"),
            ..PostfixOptions::default()
        },
    )
    .await;
    world.set("smtp.port", postfix.port);
    let (customer, invoices) = customer_with(world.pool(), "Split", &[12, 10]).await;
    sqlx::query("UPDATE customers SET email = 'ap@split.test, boss@gone.test' WHERE id = $1")
        .bind(customer)
        .execute(world.pool())
        .await
        .unwrap();

    tick(&world).await;

    world.wait_for_mails(1).await;
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1, "one statement");
    let to: Vec<String> = mails[0].to.iter().map(|a| a.to_lowercase()).collect();
    assert_eq!(to, vec!["ap@split.test"]);
    let statuses: Vec<String> =
        sqlx::query_scalar("SELECT status FROM reminders ORDER BY invoice_id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(statuses, ["sent", "sent"]);
    let listed = common::cli(&world, &["suppress", "list", "--json"]).await;
    assert!(
        common::stdout(&listed).contains("boss@gone.test"),
        "{}",
        common::stdout(&listed)
    );
    for invoice in invoices {
        let out = common::cli(&world, &["explain", "--invoice", &invoice.to_string()]).await;
        let text = common::stdout(&out);
        assert!(
            text.contains("not delivered to boss@gone.test") && text.contains("5.1.2"),
            "{text}"
        );
    }
}
