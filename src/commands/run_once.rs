//! `run-once`: one tick now, or with `--dry-run` the list of what the next
//! tick would try, claiming nothing.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use chrono::NaiveDate;

use super::exit;

use crate::config::Settings;
use crate::db;
use crate::db::owed::OwedReminder;
use crate::db::owing::OwingDay;
use crate::tick::context::Context;
use crate::tick::{TickError, TickOutcome, db_err, run_tick};

pub async fn run_once(settings: Settings, dry_run: bool) -> anyhow::Result<ExitCode> {
    let pool = super::connect_pool(&settings).await?;
    let ctx = super::context(settings, pool)?;
    super::check_source(&ctx.db).await?;
    if dry_run {
        let plan = self::dry_run(&ctx, 10_000)
            .await
            .context("failed to plan the tick")?;
        outln!(
            "database date {}: {} reminder(s) would be sent{}",
            plan.today,
            plan.total,
            if plan.total > plan.would_send.len() as i64 {
                format!(" (the first {} listed)", plan.would_send.len())
            } else {
                String::new()
            }
        );
        for r in &plan.would_send {
            outln!(
                "  invoice {} ({}) to {} due {}: {} [{}]",
                r.invoice_id,
                r.number,
                r.customer_email,
                r.due_date,
                r.step,
                r.kind
            );
        }
        outln!("per step:");
        for (step, n) in &plan.per_step {
            outln!("  {step}: {n}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let shutdown = crate::shutdown::listen();
    // The tick runs as a task on the runtime's worker threads, as it does
    // under `run`. Awaited directly it would run on block_on's thread, which
    // is not a worker: every socket wakeup would cross threads (BENCHMARKS.md,
    // "The tick on a worker thread").
    let ctx = Arc::new(ctx);
    let outcome = {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        tokio::spawn(async move { run_tick(&ctx, &shutdown).await })
            .await
            .context("the tick's task failed")?
    };
    crate::shutdown::close_the_tick(&ctx).await;
    let unwritten = crate::shutdown::release(&ctx).await;
    if unwritten > 0 {
        anyhow::bail!(
            "{unwritten} delivery result(s) could not be written before exit (logged above with their Message-IDs)"
        );
    }
    let outcome = match outcome {
        Err(e) => match e.configuration_problem() {
            Some(problem) => return Err(super::UsageError(problem).into()),
            None => return Err(anyhow::Error::new(e).context("tick failed")),
        },
        Ok(outcome) => outcome,
    };
    Ok(match outcome {
        // Throttled: the relay is up and took what it would; the rest goes
        // on the next tick, slower.
        TickOutcome::Done(_)
        | TickOutcome::LockHeld
        | TickOutcome::Shutdown(_)
        | TickOutcome::Throttled(_) => ExitCode::SUCCESS,
        TickOutcome::LockUnknown
        | TickOutcome::LockLost(_)
        | TickOutcome::SmtpUnavailable(_)
        | TickOutcome::RecordFailed(_) => ExitCode::from(exit::FAILURE),
        // Logged once as a configuration error by the tick.
        TickOutcome::SmtpAuthFailed(_) => ExitCode::from(exit::USAGE),
    })
}

/// What `run-once --dry-run` would do, without claiming anything.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DryRun {
    /// The database's date in `schedule.timezone`.
    pub today: NaiveDate,
    /// Each invoice that owes a reminder and the step it would get.
    pub would_send: Vec<OwedReminder>,
    /// How many owe one in all (`would_send` stops at the limit), source
    /// problems among the listed rows left out.
    pub total: i64,
    /// How many would get each step, in stage order (listed ones only).
    pub per_step: Vec<(crate::domain::StepKey, usize)>,
    /// Listed rows that would be skipped as source problems.
    pub source_problems: usize,
}

/// Lists the reminders the next tick would try (new and retries); rows
/// with a source problem are left out (a tick skips them) and counted.
pub async fn dry_run(ctx: &Context, limit: u32) -> Result<DryRun, TickError> {
    let s = &ctx.settings;
    let today = db::today(&ctx.db, s.schedule.timezone)
        .await
        .map_err(db_err("reading the database clock"))?;
    let stages = &s.reminders.stages;
    let listing = db::owed::owed_listing(
        &ctx.db,
        &OwingDay::from_settings(s, today),
        s.reminders.max_attempts,
        limit,
    )
    .await
    .map_err(db_err("reading the invoices that owe a reminder"))?;
    let (sendable, problems): (Vec<_>, Vec<_>) = listing
        .rows
        .iter()
        .partition(|r| r.copies == 1 && r.row.clone().into_parts().is_ok());
    let would_send: Vec<OwedReminder> = sendable.into_iter().filter_map(|r| r.reminder()).collect();
    let per_step = stages
        .steps()
        .iter()
        .map(|step| {
            let n = would_send.iter().filter(|r| r.step == step.key).count();
            (step.key.clone(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    Ok(DryRun {
        today,
        would_send,
        total: listing
            .total
            .saturating_sub(i64::try_from(problems.len()).unwrap_or(i64::MAX)),
        per_step,
        source_problems: problems.len(),
    })
}
