//! One function per subcommand: connect what it needs, do it, print the
//! result. Errors carry context (`failed to ...`) and are logged once, by
//! `main`, which also maps them to exit codes.

/// `println!` that returns an error instead of panicking when stdout is
/// closed (`invoice-reminder audit | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod audit;
mod health;
mod run;
mod run_once;
mod status;

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::Command;
use crate::config::Settings;
use crate::db;

pub use audit::{AuditReport, build_report};
pub use run_once::{DryRun, dry_run};

/// Process exit codes.
pub mod exit {
    /// Runtime failure, or `audit` found duplicates.
    pub const FAILURE: u8 = 1;
    /// Bad configuration or usage.
    pub const USAGE: u8 = 2;
}

pub async fn dispatch(command: Command, settings: Settings) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => migrate(&settings).await,
        Command::Seed {
            customers,
            invoices,
            overdue_pct,
            if_empty,
        } => seed(&settings, customers, invoices, overdue_pct, if_empty).await,
        Command::RunOnce { dry_run } => run_once::run_once(settings, dry_run).await,
        Command::Run => run::run(settings).await,
        Command::Audit {
            json,
            unknown_after,
        } => audit::audit(&settings, json, unknown_after).await,
        Command::Health { url } => health::health(&settings, url).await,
        Command::Status { json, runs } => status::status(settings, json, runs).await,
    }
}

async fn connect(settings: &Settings) -> anyhow::Result<sqlx::PgPool> {
    db::connect(settings).await.with_context(|| {
        format!(
            "failed to connect to PostgreSQL at {}",
            settings.database.redacted_url()
        )
    })
}

async fn migrate(settings: &Settings) -> anyhow::Result<ExitCode> {
    let pool = connect(settings).await?;
    db::migrate(&pool)
        .await
        .context("failed to apply migrations")?;
    let applied = db::MIGRATOR.iter().count();
    outln!("database is up to date ({applied} migrations)");
    Ok(ExitCode::SUCCESS)
}

async fn seed(
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
            .context("failed to count invoices (did you run `migrate`?)")?;
        if existing > 0 {
            outln!("the database already has {existing} invoices; not seeding (--if-empty)");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let today = db::today(&pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let cutoff = settings.reminders.overdue_cutoff(today);
    let overdue = (u64::from(invoices) * u64::from(overdue_pct) + 50) / 100;
    let seeded = db::seed::seed(
        &pool,
        i64::from(customers),
        i64::from(invoices),
        overdue as i64,
        today,
        cutoff,
    )
    .await
    .context("failed to insert demo data (did you run `migrate`?)")?;
    outln!(
        "seeded {} customers and {} invoices: {} overdue and unpaid, {} paid, {} not yet due",
        seeded.customers,
        seeded.invoices,
        seeded.overdue,
        seeded.paid,
        seeded.not_yet_due
    );
    Ok(ExitCode::SUCCESS)
}
