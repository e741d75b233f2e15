//! `run-once`: one tick now, or with `--dry-run` the list of what the next
//! tick would try, claiming nothing.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use super::exit;

use crate::config::Settings;
use crate::operator::desk::Desk;
pub use crate::operator::plan::DryRun;
use crate::tick::context::Context;
use crate::tick::{TickOutcome, run_tick};

pub async fn run_once(settings: Settings, dry_run: bool) -> anyhow::Result<ExitCode> {
    let pool = super::connect_pool(&settings).await?;
    let ctx = super::context(settings, pool)?;
    Desk::new(ctx.db.clone(), Arc::clone(&ctx.settings))
        .check_source()
        .await?;
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
        if let Some(opens) = &plan.window_opens {
            outln!("the send window is closed: nothing is claimed before it opens at {opens}");
        }
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
        | TickOutcome::Throttled(_)
        | TickOutcome::OutsideWindow { .. }
        | TickOutcome::WindowClosed(_) => ExitCode::SUCCESS,
        TickOutcome::LockUnknown
        | TickOutcome::LockLost(_)
        | TickOutcome::SmtpUnavailable(_)
        | TickOutcome::RecordFailed(_) => ExitCode::from(exit::FAILURE),
        // Logged once as a configuration error by the tick.
        TickOutcome::SmtpAuthFailed(_) => ExitCode::from(exit::USAGE),
    })
}

/// Lists the reminders the next tick would try (`Desk::plan`) with the
/// tick's context: its database and settings.
pub async fn dry_run(ctx: &Context, limit: u32) -> anyhow::Result<DryRun> {
    Desk::new(ctx.db.clone(), Arc::clone(&ctx.settings))
        .plan(limit)
        .await
}
