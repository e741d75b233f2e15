//! `seed`: demo customers and invoices, with owed invoices in every step's
//! window so the demo sends every kind of reminder.

use std::process::ExitCode;

use super::desk;
use crate::config::Settings;
use crate::operator::admin::Demo;

pub async fn seed(
    settings: &Settings,
    customers: u32,
    invoices: u32,
    overdue_pct: u8,
    if_empty: bool,
) -> anyhow::Result<ExitCode> {
    let desk = desk(settings).await?;
    if if_empty {
        let existing = desk.demo_invoices().await?;
        if existing > 0 {
            outln!("the database already has {existing} invoices; not seeding (--if-empty)");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let (seeded, steps) = desk
        .seed(Demo {
            customers,
            invoices,
            overdue_pct,
        })
        .await?;
    outln!(
        "seeded {} customers and {} invoices: {} owe a reminder today (spread over {steps} steps), {} paid, {} not yet due",
        seeded.customers,
        seeded.invoices,
        seeded.owed,
        seeded.paid,
        seeded.not_yet_due
    );
    Ok(ExitCode::SUCCESS)
}
