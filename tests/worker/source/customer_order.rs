//! Customer mode over an untrusted source: the scan walks the source in
//! customer order, a page of whole customers at a time, and still treats
//! every row as untrusted input. A repeated key, a row without a
//! `customer_id` or a malformed value is skipped and reported; it never
//! sends twice, never blocks the customer's other invoices, and a page that
//! ends inside a customer never splits that customer's statement.

use std::collections::{BTreeMap, BTreeSet};

use invoice_reminder::tick::context::Context;
use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::{World, cli, stdout};

/// The source as a plain table of rows the test writes, exposed through a
/// view (the customer index the README advises, on `customer_id::text`).
const SHOP: &str = r#"
CREATE SCHEMA shop;
CREATE TABLE shop.rows (
    invoice_id text, invoice_number text, customer_name text, email text, locale text,
    amount_minor bigint, currency text, due_date date, is_paid boolean, paused boolean,
    paused_until date, payment_url text, customer_id text
);
CREATE INDEX ON shop.rows ((customer_id::text), due_date) WHERE NOT is_paid;
CREATE INDEX ON shop.rows ((invoice_id::text));
CREATE VIEW shop.source AS SELECT * FROM shop.rows;
"#;

/// Adds one source row: invoice `key` of customer `customer`, due
/// `days_ago` days ago, in `currency`.
async fn row(world: &World, key: &str, customer: Option<&str>, days_ago: i32, currency: &str) {
    sqlx::query(
        "INSERT INTO shop.rows VALUES ($1, 'N-' || $1, 'Customer ' || coalesce($2, '?'),
                coalesce($2, 'nobody') || '@example.test', NULL, 1000, $4,
                current_date - $3, false, NULL, NULL, NULL, $2)",
    )
    .bind(key)
    .bind(customer)
    .bind(days_ago)
    .bind(currency)
    .execute(world.pool())
    .await
    .unwrap();
}

/// Twelve customers with three invoices each (due 5, 25 and 40 days ago:
/// the overdue, final and final-2 steps), and among them: a key repeated
/// within one customer, a key repeated across two customers, an invoice
/// without a customer, one with a currency that is not ISO 4217. Returns
/// the invoices that must be mailed, by customer.
async fn shop_world(batch_size: u32) -> (World, BTreeMap<String, BTreeSet<String>>) {
    let mut world = World::new().await;
    sqlx::raw_sql(SHOP).execute(world.pool()).await.unwrap();
    let mut expected: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for c in 1..=12 {
        let customer = format!("c{c:02}");
        for (n, days) in [5, 25, 40].into_iter().enumerate() {
            let key = format!("{customer}-{n}");
            row(&world, &key, Some(&customer), days, "EUR").await;
            expected.entry(customer.clone()).or_default().insert(key);
        }
    }
    // Repeated within c03, and across c05 and c06: never mailed.
    row(&world, "c03-1", Some("c03"), 25, "EUR").await;
    row(&world, "twice", Some("c05"), 25, "EUR").await;
    row(&world, "twice", Some("c06"), 25, "EUR").await;
    // No customer, and a bad currency: reported, never mailed.
    row(&world, "orphan", None, 25, "EUR").await;
    row(&world, "c08-bad", Some("c08"), 25, "XYZ").await;
    expected.get_mut("c03").unwrap().remove("c03-1");
    world.set("source.relation", "shop.source");
    world.set("reminders.group_by", "customer");
    world.set("reminders.batch_size", batch_size);
    world.set("reminders.max_invoices_per_mail", 3);
    (world, expected)
}

/// Runs ticks until one sends nothing; returns, per customer, every
/// invoice its statements listed. Fails if a customer gets two statements
/// in one tick or an invoice is listed twice.
async fn tick_until_idle(
    world: &World,
    ctx: &Context,
    case: &str,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut got: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut seen = 0;
    for _ in 0..5 {
        let outcome = run_tick(ctx, &CancellationToken::new()).await.unwrap();
        assert!(
            matches!(outcome, TickOutcome::Done(_)),
            "{case}: {outcome:?}"
        );
        let received = world.sink.received();
        if received.len() == seen {
            return got;
        }
        let mut this_tick = BTreeSet::new();
        for mail in &received[seen..] {
            let to = mail.header("To").unwrap_or_default();
            let address = to.rsplit('<').next().unwrap_or_default();
            let customer = address
                .split('@')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            assert!(
                this_tick.insert(customer.clone()),
                "{case}: {customer} got two statements in one tick"
            );
            for id in mail.header("X-Invoice-Id").unwrap_or_default().split(',') {
                let listed = got.entry(customer.clone()).or_default();
                assert!(
                    listed.insert(id.trim().to_owned()),
                    "{case}: {id} listed twice"
                );
            }
        }
        seen = received.len();
    }
    panic!("{case}: still sending after five ticks");
}

#[tokio::test]
async fn pages_that_cut_customers_anywhere_mail_each_good_invoice_once_in_its_customers_statement()
{
    // batch_size 3: a page often holds one customer's rows alone (the
    // customer is then read by key); 4 and 5: pages end inside customers;
    // 500: one page. A customer with a fourth row (a bad one) may have an
    // invoice wait for the next tick (max_invoices_per_mail 3).
    for batch_size in [3, 4, 5, 500] {
        let case = format!("batch_size {batch_size}");
        let (mut world, expected) = shop_world(batch_size).await;
        world.set("reminders.min_days_between", 0);

        let ctx = world.context().await;
        let got = tick_until_idle(&world, &ctx, &case).await;

        assert_eq!(got, expected, "{case}");
        let summary: i32 =
            sqlx::query_scalar("SELECT source_problems FROM job_runs ORDER BY id LIMIT 1")
                .fetch_one(world.pool())
                .await
                .unwrap();
        // c03-1 and twice (repeated), orphan (no customer), c08-bad.
        assert_eq!(summary, 4, "{case}");
        // Every tick reports them again.
        let ticks: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs")
            .fetch_one(world.pool())
            .await
            .unwrap();
        let problems = ctx.metrics.encode().unwrap();
        for (problem, n) in [
            ("repeated_key", 2),
            ("missing_field", 1),
            ("bad_currency", 1),
        ] {
            let line = format!(
                "invoice_reminder_source_problems_total{{problem=\"{problem}\"}} {}",
                n * ticks
            );
            assert!(
                problems.contains(&line),
                "{case}: {line} missing from\n{problems}"
            );
        }
        let mailed_bad: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM reminders
              WHERE invoice_id IN ('c03-1', 'twice', 'orphan', 'c08-bad')",
        )
        .fetch_one(world.pool())
        .await
        .unwrap();
        assert_eq!(mailed_bad, 0, "{case}");
    }
}

#[tokio::test]
async fn check_source_in_customer_mode_explains_the_customer_scan_and_advises_its_index() {
    let mut world = World::new().await;
    world.set("reminders.group_by", "customer");
    sqlx::raw_sql(
        "INSERT INTO customers (name, email)
         SELECT 'Customer ' || g, 'c' || g || '@example.test' FROM generate_series(1, 50) g;
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT 1 + g % 50, 'INV-' || g, 1000, 'EUR', current_date - 10 - g % 30
           FROM generate_series(1, 20000) g;
         DROP INDEX invoices_unpaid_customer_key;
         DROP INDEX invoices_customer_key;
         ANALYZE invoices; ANALYZE customers;",
    )
    .execute(world.pool())
    .await
    .unwrap();

    let before = cli(&world, &["check-source"]).await;
    sqlx::raw_sql(
        "CREATE INDEX invoices_unpaid_customer_key ON invoices ((customer_id::text), due_date)
          WHERE paid_at IS NULL;
         ANALYZE invoices;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let after = cli(&world, &["check-source"]).await;

    let before_text = stdout(&before);
    assert_eq!(before.status.code(), Some(0), "{before_text}");
    assert!(
        before_text.contains("a page in customer order"),
        "{before_text}"
    );
    assert!(
        before_text.contains("warning: the scan reads invoice_reminder.invoices")
            && before_text.contains("((<customer column>::text), <due date column>)"),
        "{before_text}"
    );
    let after_text = stdout(&after);
    assert!(!after_text.contains("warning"), "{after_text}");
    assert!(
        after_text.contains("invoices_unpaid_customer_key"),
        "{after_text}"
    );
}
