//! `seed`: demo customers and invoices, with owed invoices in every step's
//! window so the demo sends every kind of reminder.

use std::process::ExitCode;

use anyhow::Context as _;

use super::{connect, db_failed};
use crate::config::Settings;
use crate::db;
use crate::db::seed::SeedStep;

pub async fn seed(
    settings: &Settings,
    customers: u32,
    invoices: u32,
    overdue_pct: u8,
    if_empty: bool,
) -> anyhow::Result<ExitCode> {
    let pool = connect(settings).await?;
    if if_empty {
        let existing = db::seed::count_invoices(&pool)
            .await
            .map_err(db_failed("failed to count invoices"))?;
        if existing > 0 {
            outln!("the database already has {existing} invoices; not seeding (--if-empty)");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let today = db::today(&pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let stages = &settings.reminders.stages;
    // Owed invoices land in every step's window in turn, so the demo sends
    // every kind of reminder; the rest are paid or not due for a while.
    let steps: Vec<SeedStep> = stages
        .windows(today)
        .iter()
        .map(|w| SeedStep {
            latest_due: w.due_to,
            span: w
                .due_from
                .map_or(10, |from| (w.due_to - from).num_days() as i32 + 1),
        })
        .collect();
    let first = stages.steps().first().map_or(0, |s| s.offset);
    let not_due_after = today + chrono::TimeDelta::days(-first);
    let owed = (u64::from(invoices) * u64::from(overdue_pct) + 50) / 100;
    let seeded = db::seed::seed(
        &pool,
        i64::from(customers),
        i64::from(invoices),
        owed as i64,
        &steps,
        today,
        not_due_after,
    )
    .await
    .map_err(db_failed("failed to insert demo data"))?;
    outln!(
        "seeded {} customers and {} invoices: {} owe a reminder today (spread over {} steps), {} paid, {} not yet due",
        seeded.customers,
        seeded.invoices,
        seeded.owed,
        steps.len(),
        seeded.paid,
        seeded.not_yet_due
    );
    Ok(ExitCode::SUCCESS)
}
