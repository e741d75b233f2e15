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
mod status;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::Command;
use crate::config::Settings;
use crate::context::Context;
use crate::db;
use crate::reminders::{self, TickOutcome};

pub use audit::{AuditReport, build_report};

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
        Command::RunOnce { dry_run } => run_once(settings, dry_run).await,
        Command::Run => run(settings).await,
        Command::Audit {
            json,
            unknown_after,
        } => audit::audit(&settings, json, unknown_after).await,
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

async fn run_once(settings: Settings, dry_run: bool) -> anyhow::Result<ExitCode> {
    let pool = connect(&settings).await?;
    let ctx = Context::new(settings, pool).context("failed to set up the lock backend")?;
    if dry_run {
        let plan = reminders::dry_run(&ctx, 10_000)
            .await
            .context("failed to plan the tick")?;
        outln!(
            "period {} (database date {}): {} reminder(s) would be sent",
            plan.period,
            plan.today,
            plan.would_send.len()
        );
        for r in &plan.would_send {
            outln!(
                "  invoice {} ({}) to {} due {} [{}]",
                r.invoice_id,
                r.number,
                r.customer_email,
                r.due_date,
                r.kind
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let shutdown = crate::shutdown::listen();
    // The tick runs as a task on the runtime's worker threads, as it does
    // under `run`. Awaited directly it would run on block_on's thread, which
    // is not a worker: every socket wakeup would cross threads, and a large
    // tick measured about 25 % slower that way (BENCHMARKS.md).
    let ctx = Arc::new(ctx);
    let outcome = {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        tokio::spawn(async move { reminders::run_tick(&ctx, &shutdown).await })
            .await
            .context("the tick's task failed")?
    };
    ctx.mailer.shutdown().await;
    ctx.lock.finish().await;
    let outcome = outcome.context("tick failed")?;
    Ok(match outcome {
        TickOutcome::Done(_) | TickOutcome::LockHeld | TickOutcome::Shutdown(_) => {
            ExitCode::SUCCESS
        }
        TickOutcome::LockUnknown | TickOutcome::LockLost(_) | TickOutcome::SmtpUnavailable(_) => {
            ExitCode::from(exit::FAILURE)
        }
    })
}

async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    let shutdown = crate::shutdown::listen();
    let grace = settings.shutdown.timeout;
    let pool = db::connect_lazy(&settings);
    let ctx = Arc::new(Context::new(settings, pool).context("failed to set up the lock backend")?);
    tracing::info!(
        replica_id = %ctx.settings.replica_id,
        database = %ctx.settings.database.redacted_url(),
        lock = %ctx.lock.describe(),
        "worker starting"
    );
    let worker = tokio::spawn(crate::scheduler::run_until_stopped(
        ctx.clone(),
        shutdown.clone(),
    ));
    shutdown.cancelled().await;
    match tokio::time::timeout(grace, worker).await {
        Ok(Ok(Ok(()))) => {
            tracing::info!("worker stopped");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(join)) => Err(anyhow::anyhow!("worker task failed: {join}")),
        Err(_) => {
            anyhow::bail!(
                "the tick in flight did not finish within shutdown.timeout ({}); rows it was sending stay 'sending'",
                humantime::format_duration(grace)
            )
        }
    }
}
