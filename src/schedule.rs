//! Cron wiring only: on each fire, run one tick.
//!
//! tokio-cron-scheduler spawns every fire in a task of its own, so a slow
//! tick would overlap the next one. Fires are therefore only *signals*: a
//! single loop runs ticks one after another, and a fire that arrives while a
//! tick runs is skipped (logged), never queued or doubled up.
//!
//! Cron expressions have six fields, seconds first (`0 */5 * * * *`), and
//! combine day-of-month and day-of-week with AND (not cron's usual OR).
//! The scheduler's timer follows the wall clock; which tick a replica runs
//! never depends on that clock, because the period comes from the database
//! and the lock (with `min_hold`) stops a late replica repeating a tick.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::liveness::Liveness;
use crate::tick::{TickOutcome, run_tick};

/// Marks the loop stopped when dropped, on every exit path (panics too).
struct LoopRunning<'a>(&'a Liveness);

impl Drop for LoopRunning<'_> {
    fn drop(&mut self) {
        self.0.tick_finished();
        self.0.set_loop_running(false);
    }
}

/// Runs ticks on `schedule.cron` until `shutdown` is cancelled, then
/// returns once the tick in flight (if any) has finished. `liveness` learns
/// when the loop runs and when each tick starts and ends.
pub async fn run_until_stopped(
    ctx: Arc<Context>,
    shutdown: CancellationToken,
    liveness: Liveness,
) -> anyhow::Result<()> {
    let (fires, mut fired) = mpsc::channel::<()>(1);
    // True while a tick runs; a fire seen meanwhile is skipped.
    let busy = Arc::new(AtomicBool::new(false));

    let mut scheduler = JobScheduler::new()
        .await
        .context("failed to create the scheduler")?;
    let schedule = &ctx.settings.schedule;
    let job_busy = busy.clone();
    let job = Job::new_async_tz(
        schedule.cron.as_str(),
        schedule.timezone,
        move |_id, _sched| {
            let fires = fires.clone();
            let busy = job_busy.clone();
            Box::pin(async move {
                if busy.load(Ordering::SeqCst) || fires.try_send(()).is_err() {
                    tracing::info!("previous tick still running; skipping this fire");
                }
            })
        },
    )
    .with_context(|| format!("invalid schedule.cron {:?}", schedule.cron))?;
    scheduler.add(job).await.context("failed to add the job")?;
    scheduler
        .start()
        .await
        .context("failed to start the scheduler")?;
    tracing::info!(cron = %schedule.cron, timezone = %schedule.timezone, "scheduler started");
    liveness.set_loop_running(true);
    let _running = LoopRunning(&liveness);

    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            fire = fired.recv() => {
                if fire.is_none() {
                    break;
                }
                test_fault("scheduler-panic");
                busy.store(true, Ordering::SeqCst);
                liveness.tick_started();
                let outcome = run_tick(&ctx, &shutdown).await;
                liveness.tick_finished();
                match outcome {
                    Ok(TickOutcome::LockLost(_)) => {
                        tracing::warn!("tick cancelled: the lock was lost");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "tick failed; the next fire will try again"),
                }
                busy.store(false, Ordering::SeqCst);
            }
        }
    }
    if let Err(e) = scheduler.shutdown().await {
        tracing::warn!(error = %e, "scheduler did not shut down cleanly");
    }
    ctx.mailer.shutdown().await;
    ctx.lock.finish().await;
    Ok(())
}

/// Fault injection for the fault suite, compiled into debug builds only:
/// `INVOICE_REMINDER_TEST_FAULT=scheduler-panic` makes the loop panic on its
/// first fire, to prove that `run` exits when its scheduler dies.
fn test_fault(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("INVOICE_REMINDER_TEST_FAULT").is_ok_and(|v| v == name) {
        panic!("test fault injected: {name}");
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}
