//! Source dates are untrusted input: a view may hold `infinity` or
//! `-infinity` in a `date` column (often "no due date"), or a year the
//! worker cannot hold. Such a row is a source problem (`bad_due_date`),
//! reported by the tick, `audit`, `explain` and `preview`; it never stops
//! another invoice's reminder and never panics anything.

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

/// The demo view, plus a table of rows of the user's own making (same
/// columns, any date).
async fn with_extra_rows(world: &mut World) {
    sqlx::raw_sql(
        "CREATE TABLE extra_rows AS SELECT * FROM reminder_source LIMIT 0;
         CREATE VIEW with_extra AS SELECT * FROM reminder_source UNION ALL SELECT * FROM extra_rows;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "with_extra");
}

/// A row for key `key`, of customer `customer`, due `due` (SQL text).
async fn extra_row(world: &World, key: &str, customer: i64, due: &str) {
    sqlx::query(
        "INSERT INTO extra_rows (invoice_id, invoice_number, customer_name, email, amount_minor,
                                 currency, due_date, is_paid, paused, customer_id)
         VALUES ($1, 'X-' || $1, 'Odd', 'odd@example.test', 500, 'EUR', $2::date, false, false, $3::text)",
    )
    .bind(key)
    .bind(due)
    .bind(customer)
    .execute(world.pool())
    .await
    .unwrap();
}

async fn problems_in_audit(world: &World) -> (Option<i32>, Vec<String>) {
    let out = common::cli(world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::stdout(&out)));
    let problems = report["source_problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} {}",
                p["invoice_id"].as_str().unwrap_or("?"),
                p["problem"].as_str().unwrap_or("?")
            )
        })
        .collect();
    (out.status.code(), problems)
}

async fn a_minus_infinity_due_date_is_reported_and_every_other_reminder_goes(customer_mode: bool) {
    let mut world = World::new().await;
    if customer_mode {
        world.set("reminders.group_by", "customer");
    }
    let owed = common::insert_overdue(world.pool(), 3).await;
    let customer: i64 = sqlx::query_scalar("SELECT customer_id FROM invoices WHERE id = $1")
        .bind(owed[0])
        .fetch_one(world.pool())
        .await
        .unwrap();
    with_extra_rows(&mut world).await;
    extra_row(&world, "no-due-date", customer, "-infinity").await;
    extra_row(&world, "far-future", customer, "infinity").await;

    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let mut mailed = world.sink.invoice_ids();
    if customer_mode {
        mailed = world
            .sink
            .received()
            .iter()
            .flat_map(|m| {
                m.header("X-Invoice-Id")
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|id| id.trim().parse().ok())
                    .collect::<Vec<i64>>()
            })
            .collect();
    }
    mailed.sort_unstable();
    assert_eq!(mailed, owed, "every other reminder goes");
    assert!(
        outcome
            .summary()
            .is_some_and(|s| s.counts.source_problems >= 1),
        "{outcome:?}"
    );
    let (code, problems) = problems_in_audit(&world).await;
    assert_eq!(code, Some(0));
    assert!(
        problems.contains(&"no-due-date bad_due_date".to_owned()),
        "{problems:?}"
    );
}

#[tokio::test]
async fn a_minus_infinity_due_date_is_reported_and_every_other_reminder_goes_in_invoice_mode() {
    a_minus_infinity_due_date_is_reported_and_every_other_reminder_goes(false).await;
}

#[tokio::test]
async fn a_minus_infinity_due_date_is_reported_and_every_other_reminder_goes_in_customer_mode() {
    a_minus_infinity_due_date_is_reported_and_every_other_reminder_goes(true).await;
}

#[tokio::test]
async fn explain_and_preview_answer_for_infinite_and_far_dates_without_panicking() {
    let mut world = World::new().await;
    let owed = common::insert_overdue(world.pool(), 1).await;
    let customer: i64 = sqlx::query_scalar("SELECT customer_id FROM invoices WHERE id = $1")
        .bind(owed[0])
        .fetch_one(world.pool())
        .await
        .unwrap();
    with_extra_rows(&mut world).await;
    for (key, due) in [
        ("inf", "infinity"),
        ("minus-inf", "-infinity"),
        ("far", "300000-01-01"),
    ] {
        extra_row(&world, key, customer, due).await;
        let out = common::cli(&world, &["explain", "--invoice", key, "--json"]).await;
        let text = common::stdout(&out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{key}: {text}{stderr}");
        let explained: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(explained["reason"], "source_problem", "{key}: {text}");
        assert_eq!(explained["source_problem"], "bad_due_date", "{key}: {text}");

        let out = common::cli(&world, &["preview", "--invoice", key]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{key}: {stderr}");
        assert_eq!(out.status.code(), Some(1), "{key}: {stderr}");
        assert!(stderr.contains("bad_due_date"), "{key}: {stderr}");
    }
}
