//! One mail per customer (`reminders.group_by = "customer"`): every
//! invoice of a customer that owes a step today in one statement, each
//! (invoice, step) still claimed and recorded once. The files beside this
//! one prove the promises it shares with invoice mode: rows that cannot be
//! mailed hold nothing back (`clean_rows`), the operator is told the
//! Message-ID that was sent (`message_ids`), what does not fit goes on the
//! next tick and retries go with new steps (`rounds`), nothing never sent
//! is left unknown (`unsent`), and a statement goes by its customer's own
//! date (`zones`).

mod addresses;
mod clean_rows;
mod explain_reads;
mod message_ids;
mod payment_holds;
mod rounds;
mod unsent;
mod zones;

use invoice_reminder::tick::run_tick;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

async fn world_in_customer_mode() -> World {
    let mut world = World::new().await;
    world.set("reminders.group_by", "customer");
    world
}

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

/// A customer with invoices due `days_ago` days ago (negative: in the
/// future); returns the customer id and the invoice ids in that order.
async fn customer_with(pool: &PgPool, name: &str, days_ago: &[i32]) -> (i64, Vec<i64>) {
    let customer: i64 = sqlx::query_scalar(
        "INSERT INTO customers (name, email) VALUES ($1, lower($1) || '@example.test') RETURNING id",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap();
    let mut invoices = Vec::new();
    for (n, days) in days_ago.iter().enumerate() {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
             VALUES ($1, 'INV-' || $1 || '-' || $2, 1000 * ($2 + 1), 'EUR', current_date - $3)
             RETURNING id",
        )
        .bind(customer)
        .bind(i32::try_from(n).unwrap())
        .bind(days)
        .fetch_one(pool)
        .await
        .unwrap();
        invoices.push(id);
    }
    (customer, invoices)
}

/// The invoice ids a statement lists in its `X-Invoice-Id` header.
fn listed(mail: &common::smtp::Received) -> Vec<i64> {
    let mut ids: Vec<i64> = mail
        .header("X-Invoice-Id")
        .unwrap_or_default()
        .split(',')
        .filter_map(|id| id.trim().parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

/// (invoice, step, status, message_id) of every reminder row.
async fn rows(pool: &PgPool) -> Vec<(i64, String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT invoice_id::bigint, period, status, message_id FROM reminders ORDER BY 1, 2",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_customer_with_five_invoices_across_three_steps_gets_one_mail_listing_all_five() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 0);
    // Due in 1 and 2 days (upcoming), 5 and 10 days ago (overdue), 25 days
    // ago (final); and another customer with one invoice.
    let (_, invoices) = customer_with(world.pool(), "Five", &[-1, -2, 5, 10, 25]).await;
    let (_, other) = customer_with(world.pool(), "Other", &[10]).await;

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 2, "one mail per customer");
    let five = mails
        .iter()
        .find(|m| m.to.iter().any(|t| t.contains("five@")))
        .expect("the statement to Five");
    let mut expected = invoices.clone();
    expected.sort_unstable();
    assert_eq!(listed(five), expected);
    for number in ["INV-", "Total"] {
        assert!(five.body.contains(number), "{number} in {}", five.body);
    }
    // The worst step is final: the wording escalates with it.
    assert!(five.subject.starts_with("Final notice"), "{}", five.subject);
    let rows = rows(world.pool()).await;
    assert_eq!(rows.len(), 6, "one row per (invoice, step): {rows:?}");
    let steps: Vec<&str> = rows
        .iter()
        .filter(|r| invoices.contains(&r.0))
        .map(|r| r.1.as_str())
        .collect();
    assert_eq!(
        steps,
        ["upcoming", "upcoming", "overdue", "overdue", "final"]
    );
    let message_ids: std::collections::BTreeSet<_> = rows
        .iter()
        .filter(|r| invoices.contains(&r.0))
        .map(|r| (r.2.as_str(), r.3.clone()))
        .collect();
    assert_eq!(
        message_ids.len(),
        1,
        "every row of the mail: sent, one Message-ID"
    );
    let (status, id) = message_ids.into_iter().next().unwrap();
    assert_eq!(status, "sent");
    assert_eq!(
        five.header("Message-ID").map(str::trim),
        id.map(|id| format!("<{id}>")).as_deref()
    );
    assert_eq!(
        listed(
            mails
                .iter()
                .find(|m| m.to.iter().any(|t| t.contains("other@")))
                .unwrap()
        ),
        other
    );

    tick(&world).await;
    assert_eq!(world.sink.count(), 2, "the next tick sends nothing");

    // Twenty days later every invoice owes its next step (overdue, final,
    // final-2); one of them was paid meanwhile and is not listed.
    sqlx::query("UPDATE invoices SET paid_at = now() WHERE id = $1")
        .bind(invoices[0])
        .execute(world.pool())
        .await
        .unwrap();
    common::age_invoices(world.pool(), 20).await;
    tick(&world).await;
    let mails = world.sink.received();
    let later: Vec<_> = mails
        .iter()
        .skip(2)
        .filter(|m| m.to.iter().any(|t| t.contains("five@")))
        .collect();
    assert_eq!(later.len(), 1, "one more statement for Five");
    assert_eq!(listed(later[0]), invoices[1..].to_vec());
    common::assert_no_duplicate_mail(&world.sink);
}

#[tokio::test]
async fn min_days_between_counts_per_customer_in_customer_mode() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 3);
    let (customer, _) = customer_with(world.pool(), "Gap", &[10]).await;
    tick(&world).await;
    assert_eq!(world.sink.count(), 1);
    // A new invoice of the same customer becomes due: within the gap the
    // customer gets nothing, even though this invoice was never reminded.
    sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-NEW', 500, 'EUR', current_date - 5)",
    )
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();
    tick(&world).await;
    assert_eq!(world.sink.count(), 1, "no second mail within the gap");
    // Once the gap is over (the first reminder was claimed 3 days ago), it goes.
    sqlx::query("UPDATE reminders SET created_at = created_at - interval '3 days', claimed_at = claimed_at - interval '3 days'")
        .execute(world.pool())
        .await
        .unwrap();
    tick(&world).await;
    assert_eq!(world.sink.count(), 2);
}

#[tokio::test]
async fn at_most_max_invoices_per_mail_are_listed_oldest_first_and_the_rest_wait() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.max_invoices_per_mail", 3);
    world.set("reminders.min_days_between", 0);
    let (_, invoices) = customer_with(world.pool(), "Many", &[5, 9, 7, 12, 6]).await;
    tick(&world).await;
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    // Oldest due dates first: 12, 9 and 7 days ago.
    let mut oldest = vec![invoices[3], invoices[1], invoices[2]];
    oldest.sort_unstable();
    assert_eq!(listed(&mails[0]), oldest);
    tick(&world).await;
    let mails = world.sink.received();
    assert_eq!(mails.len(), 2, "the rest in the next tick");
    let mut rest = vec![invoices[0], invoices[4]];
    rest.sort_unstable();
    assert_eq!(listed(&mails[1]), rest);
}

#[tokio::test]
async fn customer_mode_without_a_customer_id_column_exits_2_naming_it() {
    let mut world = world_in_customer_mode().await;
    sqlx::query(
        "CREATE VIEW no_customer AS SELECT invoice_id, invoice_number, customer_name, email,
                locale, amount_minor, currency, due_date, is_paid, paused, paused_until,
                payment_url FROM reminder_source",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "no_customer");
    for args in [&["run-once"][..], &["check-source"][..]] {
        let out = common::cli(&world, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("customer_id"), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn preview_customer_prints_the_statement_the_tick_sends() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 0);
    let (customer, _) = customer_with(world.pool(), "Peek", &[4, 11, 30]).await;
    let out = common::cli(&world, &["preview", "--customer", &customer.to_string()]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preview = common::stdout(&out);
    assert_eq!(world.sink.count(), 0, "preview sends nothing");
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(written, 0, "preview writes nothing");
    tick(&world).await;
    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    let sent = &mails[0];
    assert!(
        preview.contains(&format!("Subject: {}", sent.subject)),
        "{preview}"
    );
    for line in sent.body.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            preview.contains(line.trim_end()),
            "{line:?} not in the preview:\n{preview}"
        );
    }
}

#[tokio::test]
async fn a_customers_next_statement_replies_to_the_one_before() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 0);
    let (customer, _) = customer_with(world.pool(), "Thread", &[5, 8]).await;
    tick(&world).await;
    common::age_invoices(world.pool(), 20).await;
    tick(&world).await;
    // A new invoice of the same customer, in a statement of its own: the
    // thread is the customer's, not the invoice's.
    sqlx::query(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-LATE', 700, 'EUR', current_date - 4)",
    )
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();
    tick(&world).await;
    let mails = world.sink.received();
    assert_eq!(mails.len(), 3, "three statements");
    let second = mails[1]
        .header("Message-ID")
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert_eq!(
        mails[2].header("In-Reply-To").map(str::trim),
        Some(second.as_str()),
        "the new invoice's statement continues the customer's thread"
    );
    let first = mails[0]
        .header("Message-ID")
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(first.starts_with("<statement-"), "{first}");
    assert_eq!(
        mails[1].header("In-Reply-To").map(str::trim),
        Some(first.as_str())
    );
    assert_eq!(
        mails[1].header("References").map(str::trim),
        Some(first.as_str())
    );
    for mail in &mails {
        assert_eq!(
            mail.header("Auto-Submitted").map(str::trim),
            Some("auto-generated")
        );
    }
}

#[tokio::test]
async fn explain_counts_the_gap_per_customer_in_customer_mode() {
    let mut world = world_in_customer_mode().await;
    world.set("reminders.min_days_between", 3);
    let (customer, _) = customer_with(world.pool(), "Explained", &[10]).await;
    tick(&world).await;
    assert_eq!(world.sink.count(), 1);
    let new: i64 = sqlx::query_scalar(
        "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         VALUES ($1, 'INV-NEXT', 500, 'EUR', current_date - 5) RETURNING id",
    )
    .bind(customer)
    .fetch_one(world.pool())
    .await
    .unwrap();
    let out = common::cli(
        &world,
        &["explain", "--invoice", &new.to_string(), "--json"],
    )
    .await;
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["reason"], "min_gap_until", "{e}");
    tick(&world).await;
    assert_eq!(
        world.sink.count(),
        1,
        "and the tick agrees: nothing within the gap"
    );
}

#[tokio::test]
async fn a_page_whose_customers_owe_more_rows_than_the_claim_bound_is_sent_whole() {
    // batch_size 4 bounds the claimed-but-unrecorded rows at 8; a page of
    // four customers with three invoices each (three steps) owes 12 rows.
    // Claiming them step by step while holding the earlier steps' rows
    // once waited for room that only its own rows could free: the tick
    // hung with the worker and the database idle.
    let mut world = world_in_customer_mode().await;
    world.set("reminders.batch_size", 4);
    world.set("reminders.max_invoices_per_mail", 3);
    world.set("reminders.min_days_between", 0);
    let mut expected = Vec::new();
    for n in 0..8 {
        let (_, mut invoices) =
            customer_with(world.pool(), &format!("Bound{n}"), &[-1, 10, 25]).await;
        invoices.sort_unstable();
        expected.push(invoices);
    }

    let ctx = world.context().await;
    let ticked = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_tick(&ctx, &CancellationToken::new()),
    )
    .await;
    ticked
        .expect("the tick ends instead of waiting for room it holds itself")
        .unwrap();

    let mut got: Vec<Vec<i64>> = world.sink.received().iter().map(listed).collect();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(
        got, expected,
        "one statement per customer, all three invoices"
    );
    let rows = rows(world.pool()).await;
    assert_eq!(rows.len(), 24, "one row per (invoice, step)");
    assert!(rows.iter().all(|r| r.2 == "sent"), "{rows:?}");
}
