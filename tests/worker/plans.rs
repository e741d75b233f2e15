//! The shape of the scan's plan, as `check-source` prints it: what a row
//! owes is worked out once per row. Flattened into the page, PostgreSQL
//! copies the verdict into every column that reads it and runs each of its
//! probes again for each copy (BENCHMARKS.md, "The per-row probe"): a cost
//! that no row count shows, since the probes find nothing.

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
