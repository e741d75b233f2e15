//! Setting a database up: our schema's migrations, and the demo's data
//! (customers and invoices owed in every step's window, so the demo sends
//! every kind of reminder; the rest paid or not due for a while).

use anyhow::Context as _;

use super::db_failed;
use super::desk::Desk;
use crate::config::Settings;
use crate::db;
use crate::db::seed::SeedStep;
pub use crate::db::seed::Seeded;

/// Applies the pending migrations of our schema on `pool` (a direct
/// connection: they run under a session advisory lock); how many the
/// schema has in all.
pub async fn migrate(pool: &sqlx::PgPool, settings: &Settings) -> anyhow::Result<usize> {
    db::migrate(pool, &settings.database.schema)
        .await
        .context("failed to apply migrations")?;
    Ok(db::MIGRATOR.iter().count())
}

/// What to seed.
#[derive(Debug, Clone, Copy)]
pub struct Demo {
    pub customers: u32,
    pub invoices: u32,
    /// The share of invoices that owe a reminder today, in percent.
    pub overdue_pct: u8,
}

impl Desk {
    /// How many invoices the demo tables hold.
    pub async fn demo_invoices(&self) -> anyhow::Result<i64> {
        db::seed::count_invoices(self.db())
            .await
            .map_err(db_failed("failed to count invoices"))
    }

    /// Seeds `demo` into the demo tables; with it, how many steps the
    /// owed invoices are spread over.
    pub async fn seed(&self, demo: Demo) -> anyhow::Result<(Seeded, usize)> {
        let today = self
            .today()
            .await
            .context("failed to read the database clock")?;
        let stages = &self.settings().reminders.stages;
        let steps: Vec<SeedStep> = stages
            .windows(today)
            .iter()
            .map(|w| SeedStep {
                latest_due: w.due_to,
                span: w.due_from.map_or(10, |from| {
                    i32::try_from((w.due_to - from).num_days())
                        .unwrap_or(i32::MAX)
                        .saturating_add(1)
                        .max(0)
                }),
            })
            .collect();
        let not_due_after = stages
            .steps()
            .first()
            .map_or(today, |s| stages.latest_due(s, today));
        let owed = (u64::from(demo.invoices) * u64::from(demo.overdue_pct) + 50) / 100;
        let seeded = db::seed::seed(
            self.db(),
            i64::from(demo.customers),
            i64::from(demo.invoices),
            i64::try_from(owed).unwrap_or(i64::MAX),
            &steps,
            today,
            not_due_after,
        )
        .await
        .map_err(db_failed("failed to insert demo data"))?;
        Ok((seeded, steps.len()))
    }
}
