//! A round of mail to one customer: what does not fit
//! `max_invoices_per_mail` goes on the next tick (the customer gap does
//! not hold a statement's own continuation back), a failed statement's
//! retry goes out with the customer's new steps in one statement, and no
//! customer gets two mails within `min_days_between` otherwise.

use std::time::Duration;

use super::{customer_with, listed, tick, world_in_customer_mode};
use crate::common::{self, SmtpMode};

#[tokio::test]
async fn with_one_invoice_per_mail_three_owed_invoices_go_out_in_three_statements_the_same_day() {
    let mut world = world_in_customer_mode().await; // min_days_between = 2
    world.set("reminders.max_invoices_per_mail", 1);
    let (customer, invoices) = customer_with(world.pool(), "Three", &[12, 11, 10]).await;

    for _ in 0..3 {
        tick(&world).await;
    }

    let mails = world.sink.received();
    let each: Vec<Vec<i64>> = mails.iter().map(listed).collect();
    assert_eq!(
        each,
        vec![vec![invoices[0]], vec![invoices[1]], vec![invoices[2]]],
        "oldest first, one per tick"
    );
    // The round is over: a new invoice waits for the gap.
    sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-NEW', 500, 'EUR', current_date - 5)",
    )
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();
    tick(&world).await;
    assert_eq!(world.sink.count(), 3, "no fourth mail within the gap");
    common::assert_no_duplicate_mail(&world.sink);
}

#[tokio::test]
async fn a_failed_statements_retry_and_a_new_invoice_go_out_in_one_statement() {
    let mut world = world_in_customer_mode().await; // min_days_between = 2
    world.set("reminders.retry_backoff", "1s");
    let (customer, first) = customer_with(world.pool(), "Retry", &[10]).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    assert_eq!(common::count_status(world.pool(), "failed").await, 1);
    // A new invoice of the same customer becomes due meanwhile.
    let second: i64 = sqlx::query_scalar(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-NEW', 500, 'EUR', current_date - 5) RETURNING id",
    )
    .bind(customer)
    .fetch_one(world.pool())
    .await
    .unwrap();
    world.sink.set_mode(SmtpMode::Accept);
    let refused = world.sink.count();

    // While the retry's backoff runs, the new invoice waits for it.
    tick(&world).await;
    assert_eq!(
        world.sink.count(),
        refused,
        "nothing before the backoff ends"
    );
    common::wait_until("the backoff ends", Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT last_attempt_at <= now() - interval '1 second' FROM reminders WHERE status = 'failed'",
        )
        .fetch_one(world.pool())
        .await
        .unwrap_or(false)
    })
    .await;
    tick(&world).await;
    tick(&world).await;

    let accepted: Vec<Vec<i64>> = world.sink.received()[refused..]
        .iter()
        .map(listed)
        .collect();
    let mut both = vec![first[0], second];
    both.sort_unstable();
    assert_eq!(
        accepted,
        vec![both],
        "one statement with the retry and the new invoice"
    );
}

#[tokio::test]
async fn a_failed_statements_retry_is_not_sent_within_the_gap_of_a_statement_sent_since() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 2);
    let (customer, invoices) = customer_with(world.pool(), "Gap", &[10]).await;
    tick(&world).await;
    assert_eq!(world.sink.count(), 1);
    // A retry of another of its invoices becomes due (its first statement
    // failed before this one went out): the gap keeps it back.
    sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-OLD', 500, 'EUR', current_date - 8)",
    )
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO reminders (invoice_id, period, status, attempts, customer_id, claimed_at)
         SELECT id::text, 'overdue', 'failed', 1, $1::text, now() - interval '3 days'
           FROM invoices WHERE number = 'INV-OLD'",
    )
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();

    tick(&world).await;

    assert_eq!(world.sink.count(), 1, "no second mail within the gap");
    assert_eq!(listed(&world.sink.received()[0]), invoices);
}
