//! `run-once`: one tick now, or with `--dry-run` the list of what the next
//! tick would try, claiming nothing.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::NaiveDate;

use super::{connect, exit};
use crate::config::Settings;
use crate::context::Context;
use crate::db;
use crate::period::period_key;
use crate::tick::{TickError, TickOutcome, db_err, run_tick};

pub(super) async fn run_once(settings: Settings, dry_run: bool) -> anyhow::Result<ExitCode> {
    let pool = connect(&settings).await?;
    let ctx = Context::new(settings, pool).context("failed to set up the lock backend")?;
    if dry_run {
        let plan = self::dry_run(&ctx, 10_000)
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
        tokio::spawn(async move { run_tick(&ctx, &shutdown).await })
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

/// What `run-once --dry-run` would do, without claiming anything.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DryRun {
    pub period: String,
    pub today: NaiveDate,
    pub would_send: Vec<db::invoices::DueReminder>,
}

/// Lists the reminders the next tick would try (new and retries).
pub async fn dry_run(ctx: &Context, limit: u32) -> Result<DryRun, TickError> {
    let s = &ctx.settings;
    let today = db::today(&ctx.db, s.schedule.timezone)
        .await
        .map_err(db_err("reading the database clock"))?;
    let period = period_key(today, s.reminders.cadence);
    let would_send = db::invoices::preview_due(
        &ctx.db,
        s.reminders.overdue_cutoff(today),
        &period,
        s.reminders.max_attempts,
        limit,
    )
    .await
    .map_err(db_err("reading overdue invoices"))?;
    Ok(DryRun {
        period,
        today,
        would_send,
    })
}
