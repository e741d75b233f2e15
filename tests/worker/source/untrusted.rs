//! The source is untrusted input: a view the user writes may repeat keys,
//! hold NULLs or malformed values. No row may send twice, block the others,
//! or crash a tick; every bad row is skipped and reported with its problem.

use std::collections::HashMap;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::{World, cli, stdout};

/// A billing schema where some accounts have two billing contacts, exposed
/// through a view that joins the contacts table: those accounts' invoices
/// appear twice. `extra_rows` adds rows of the user's own making.
const CONTACTS_SCHEMA: &str = r#"
CREATE SCHEMA crm;
CREATE TABLE crm.accounts (id bigint PRIMARY KEY, name text NOT NULL);
CREATE TABLE crm.contacts (account_id bigint NOT NULL REFERENCES crm.accounts (id), email text);
CREATE TABLE crm.invoices (
    id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES crm.accounts (id),
    total_cents bigint, currency text, due_on date, paid boolean NOT NULL DEFAULT false
);
CREATE TABLE crm.extra_rows (
    invoice_id text, invoice_number text, customer_name text, email text, locale text,
    amount_minor bigint, currency text, due_date date, is_paid boolean, paused boolean,
    paused_until date, payment_url text
);
CREATE VIEW crm.reminder_invoices AS
SELECT i.id::text AS invoice_id, 'C-' || i.id AS invoice_number, a.name AS customer_name,
       c.email AS email, NULL::text AS locale, i.total_cents AS amount_minor,
       i.currency AS currency, i.due_on AS due_date, i.paid AS is_paid,
       NULL::boolean AS paused, NULL::date AS paused_until, NULL::text AS payment_url
  FROM crm.invoices i
  JOIN crm.accounts a ON a.id = i.account_id
  JOIN crm.contacts c ON c.account_id = a.id
UNION ALL
SELECT * FROM crm.extra_rows;
"#;

/// 400 accounts with one open invoice each, 10 days overdue; every 97th
/// account has a second contact.
async fn contacts_world(batch_size: u32) -> (World, Vec<String>) {
    let mut world = World::new().await;
    sqlx::raw_sql(CONTACTS_SCHEMA)
        .execute(world.pool())
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO crm.accounts SELECT g, 'Account ' || g FROM generate_series(1, 400) g;
         INSERT INTO crm.contacts SELECT g, 'billing' || g || '@example.test' FROM generate_series(1, 400) g;
         INSERT INTO crm.contacts SELECT g, 'second' || g || '@example.test'
           FROM generate_series(1, 400) g WHERE g % 97 = 0;
         INSERT INTO crm.invoices (id, account_id, total_cents, currency, due_on)
         SELECT g, g, 10000 + g, 'EUR', current_date - 10 FROM generate_series(1, 400) g;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "crm.reminder_invoices");
    world.set("reminders.batch_size", batch_size);
    let repeated = (1..=400)
        .filter(|g| g % 97 == 0)
        .map(|g: i32| g.to_string())
        .collect();
    (world, repeated)
}

/// How many times each Message-ID reached the SMTP server.
fn message_ids(world: &World) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for m in world.sink.received() {
        let id = m.header("Message-ID").unwrap_or("?").trim().to_owned();
        *seen.entry(id).or_insert(0) += 1;
    }
    seen
}

fn assert_no_message_id_twice(world: &World) {
    let twice: Vec<_> = message_ids(world)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "Message-IDs received more than once: {twice:?}"
    );
}

fn summary(outcome: TickOutcome) -> invoice_reminder::tick::Summary {
    match outcome {
        TickOutcome::Done(s) => s,
        other => panic!("expected Done, got {other:?}"),
    }
}

#[tokio::test]
async fn a_view_that_repeats_keys_mails_every_other_invoice_once_and_reports_the_repeated_ones() {
    let (world, repeated) = contacts_world(7).await;
    sqlx::query(
        "INSERT INTO crm.extra_rows VALUES
           (NULL, 'NO-KEY', 'Nobody', 'nobody@example.test', NULL, 500, 'EUR', current_date - 10, false, NULL, NULL, NULL)",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let ctx = world.context().await;

    let first = summary(run_tick(&ctx, &CancellationToken::new()).await.unwrap());
    let second = summary(run_tick(&ctx, &CancellationToken::new()).await.unwrap());

    assert_no_message_id_twice(&world);
    let mailed: Vec<String> = world
        .sink
        .received()
        .iter()
        .map(|m| m.header("X-Invoice-Id").unwrap().trim().to_owned())
        .collect();
    assert_eq!(
        mailed.len(),
        400 - repeated.len(),
        "every invoice with one row, once"
    );
    for key in &repeated {
        assert!(
            !mailed.contains(key),
            "invoice {key} has two rows and was mailed"
        );
    }
    assert_eq!(first.counts.sent as usize, 400 - repeated.len());
    assert_eq!(second.counts.sent, 0);
    // Four repeated keys and one NULL key, reported by each tick.
    assert_eq!(first.counts.source_problems, 5, "{first:?}");
    assert_eq!(second.counts.source_problems, 5, "{second:?}");
    let recorded: i32 = sqlx::query_scalar("SELECT source_problems FROM job_runs WHERE id = $1")
        .bind(first.run_id)
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(recorded, 5);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = ANY($1)")
        .bind(&repeated)
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0, "a repeated key is skipped, not claimed");
}

#[tokio::test]
async fn repeated_keys_straddling_every_page_boundary_never_panic_nor_send_twice() {
    // batch_size 2: every pair of rows of one key can fall across a page.
    let mut world = World::new().await;
    sqlx::raw_sql(CONTACTS_SCHEMA)
        .execute(world.pool())
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO crm.accounts SELECT g, 'Account ' || g FROM generate_series(1, 30) g;
         INSERT INTO crm.contacts SELECT g, 'a' || g || '@example.test' FROM generate_series(1, 30) g;
         INSERT INTO crm.contacts SELECT g, 'b' || g || '@example.test' FROM generate_series(1, 30) g WHERE g % 3 = 0;
         INSERT INTO crm.contacts SELECT g, 'c' || g || '@example.test' FROM generate_series(1, 30) g WHERE g % 5 = 0;
         INSERT INTO crm.invoices (id, account_id, total_cents, currency, due_on)
         SELECT g, g, 100, 'EUR', current_date - 10 - (g % 2) FROM generate_series(1, 30) g;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "crm.reminder_invoices");
    let single = (1..=30).filter(|g| g % 3 != 0 && g % 5 != 0).count();
    for batch_size in [1, 2, 3] {
        world.set("reminders.batch_size", batch_size);
        let ctx = world.context().await;
        let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
        assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    }
    assert_no_message_id_twice(&world);
    assert_eq!(world.sink.count(), single);
}

#[tokio::test]
async fn a_row_with_a_null_key_or_a_missing_field_never_blocks_the_others() {
    let (world, _) = contacts_world(500).await;
    sqlx::raw_sql(
        "UPDATE crm.contacts SET email = NULL WHERE account_id = 1;
         UPDATE crm.invoices SET currency = NULL WHERE id = 2;
         UPDATE crm.invoices SET total_cents = NULL WHERE id = 3;
         UPDATE crm.invoices SET currency = 'XYZ' WHERE id = 4;
         UPDATE crm.contacts SET email = 'not an address' WHERE account_id = 5;
         UPDATE crm.invoices SET due_on = NULL WHERE id = 6;
         INSERT INTO crm.extra_rows VALUES
           (NULL, 'NO-KEY', 'Nobody', 'nobody@example.test', NULL, 500, 'EUR', current_date - 10, false, NULL, NULL, NULL);",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let ctx = world.context().await;

    let s = summary(run_tick(&ctx, &CancellationToken::new()).await.unwrap());

    assert_no_message_id_twice(&world);
    // 400 invoices, 4 of them repeated, 6 broken ones; and the NULL key.
    assert_eq!(s.counts.sent, 400 - 4 - 6, "{s:?}");
    assert_eq!(s.counts.source_problems, 4 + 6 + 1, "{s:?}");
    let problems = ctx.metrics.encode().unwrap();
    for (problem, n) in [
        ("repeated_key", 4),
        ("null_key", 1),
        ("missing_field", 4),
        ("bad_currency", 1),
        ("bad_address", 1),
    ] {
        let line = format!("invoice_reminder_source_problems_total{{problem=\"{problem}\"}} {n}");
        assert!(problems.contains(&line), "{line} missing from\n{problems}");
    }
    for id in ["1", "2", "3", "4", "5", "6"] {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = $1")
            .bind(id)
            .fetch_one(world.pool())
            .await
            .unwrap();
        assert_eq!(n, 0, "broken invoice {id} was claimed");
    }
    // Fixed by the user, it is mailed on the next tick.
    sqlx::query("UPDATE crm.invoices SET currency = 'EUR' WHERE id = 4")
        .execute(world.pool())
        .await
        .unwrap();
    let next = summary(run_tick(&ctx, &CancellationToken::new()).await.unwrap());
    assert_eq!(next.counts.sent, 1, "{next:?}");
}

#[tokio::test]
async fn several_contacts_in_one_email_cell_get_one_mail_addressed_to_all() {
    let (mut world, repeated) = contacts_world(500).await;
    sqlx::raw_sql(
        "CREATE OR REPLACE VIEW crm.reminder_invoices AS
         SELECT i.id::text AS invoice_id, 'C-' || i.id AS invoice_number, a.name AS customer_name,
                (SELECT string_agg(c.email, ', ' ORDER BY c.email) FROM crm.contacts c WHERE c.account_id = a.id)
                    || CASE WHEN a.id = 97 THEN ', BILLING97@example.test' ELSE '' END AS email,
                NULL::text AS locale, i.total_cents AS amount_minor,
                i.currency AS currency, i.due_on AS due_date, i.paid AS is_paid,
                NULL::boolean AS paused, NULL::date AS paused_until, NULL::text AS payment_url
           FROM crm.invoices i JOIN crm.accounts a ON a.id = i.account_id",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "crm.reminder_invoices");
    let ctx = world.context().await;

    let s = summary(run_tick(&ctx, &CancellationToken::new()).await.unwrap());

    assert_eq!(s.counts.sent, 400);
    assert_eq!(s.counts.source_problems, 0);
    assert_no_message_id_twice(&world);
    let to_97 = world
        .sink
        .received()
        .into_iter()
        .find(|m| m.header("X-Invoice-Id").map(str::trim) == Some(&*repeated[0]))
        .unwrap();
    let mut rcpt = to_97.to.clone();
    rcpt.sort();
    assert_eq!(
        rcpt,
        ["billing97@example.test", "second97@example.test"],
        "both contacts, the repeated one once"
    );
    let to = to_97.header("To").unwrap();
    assert!(
        to.contains("billing97@example.test") && to.contains("second97@example.test"),
        "{to}"
    );
}

#[tokio::test]
async fn audit_and_check_source_list_the_source_problems_by_invoice() {
    let (mut world, repeated) = contacts_world(500).await;
    sqlx::raw_sql(
        "UPDATE crm.invoices SET currency = 'XYZ' WHERE id = 4;
         INSERT INTO crm.extra_rows VALUES
           (NULL, 'NO-KEY', 'Nobody', 'nobody@example.test', NULL, 500, 'EUR', current_date - 10, false, NULL, NULL, NULL);",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "crm.reminder_invoices");

    let audit = cli(&world, &["audit"]).await;
    let check = cli(&world, &["check-source"]).await;

    for (what, out) in [("audit", &audit), ("check-source", &check)] {
        let text = stdout(out);
        assert!(text.contains("source problems: 6"), "{what}:\n{text}");
        assert!(text.contains("repeated_key"), "{what}:\n{text}");
        assert!(
            text.contains(&format!("invoice {}", repeated[0])),
            "{what}:\n{text}"
        );
        assert!(
            text.contains("bad_currency") && text.contains("invoice 4"),
            "{what}:\n{text}"
        );
        assert!(text.contains("null_key"), "{what}:\n{text}");
    }
    let json = cli(&world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["source_problems_count"], 6, "{report}");
}
