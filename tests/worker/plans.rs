//! The shape of the scan's plan, as `check-source` prints it: what a row
//! owes is worked out once per row. Flattened into the page, PostgreSQL
//! copies the verdict into every column that reads it and runs each of its
//! probes again for each copy (BENCHMARKS.md, "The per-row probe"): a cost
//! that no row count shows, since the probes find nothing. A row without
//! a zone of its own takes its day from the statement, once.

use crate::common::{World, cli, stdout};

/// How many plan nodes of `check-source`'s scan read `table`.
async fn reads_of(world: &World, table: &str) -> usize {
    let out = cli(world, &["check-source"]).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let plan = text
        .split_once("scan (")
        .map(|(_, plan)| plan)
        .unwrap_or_else(|| panic!("no scan plan in:\n{text}"));
    plan.lines()
        .filter(|l| l.contains(&format!(".{table} ")))
        .count()
}

#[tokio::test]
async fn an_invoice_page_asks_each_row_about_pauses_once() {
    let world = World::new().await;
    // The invoice's pause (invoice mode names no customer: that probe is
    // planned away) and its payment holds.
    assert_eq!(reads_of(&world, "console_pauses").await, 1);
    assert_eq!(reads_of(&world, "payment_holds").await, 1);
}

#[tokio::test]
async fn a_customer_page_asks_each_row_about_pauses_once() {
    let mut world = World::new().await;
    world.set("reminders.group_by", "customer");
    // The invoice's pause and its customer's, and its payment holds.
    assert_eq!(reads_of(&world, "console_pauses").await, 2);
    assert_eq!(reads_of(&world, "payment_holds").await, 1);
}

/// A row without a zone of its own is in the window's zone: its day is the
/// statement's, folded into the plan once, not converted from the clock
/// for every row and every window it is compared with (BENCHMARKS.md, "A
/// row's own day, once per statement").
#[tokio::test]
async fn a_row_without_its_own_zone_takes_its_day_from_the_plan_not_from_a_conversion_per_row() {
    let world = World::new().await;
    let (window, owing) = crate::common::window(world.pool(), "overdue").await;
    let plan =
        invoice_reminder::db::invoices::explain_owed_page(&world.database(), &window, &owing, 500)
            .await
            .expect("explain a page");
    let text = plan.to_string();
    let folded = format!("timezone IS NULL) THEN '{}'::date", owing.date);
    assert!(
        text.contains(&folded),
        "no day folded into the plan for rows without a zone ({folded}):\n{text}"
    );
}
