//! The job: one tick, from taking the lock to the summary line.
//!
//! ```text
//! try_acquire ──held──▶ LockHeld (normal; another replica works this tick)
//!      │
//!   acquired ──▶ today from the DB clock (not before the fire's slot) ──▶ start_run
//!      │
//!      ├─ claim ─▶ mark ─▶ send ─▶ record   four overlapping phases (phases.rs);
//!      │          bad source rows skipped and reported (problems.rs);
//!      │          before every mail: lease valid? shutdown? SMTP? writes OK?
//!      ├─ hand back rows never started
//!      ▼
//! finish_run ──▶ stop watchdog ──▶ release (or hold until min_hold)
//! ```
//!
//! [`run_tick`] takes the lock; [`work_period`] is the part after it and can
//! be called with any [`LeaseGuard`] (tests use it to bypass the lock and
//! prove that the database alone prevents duplicates). A tick never sends a
//! reminder it did not claim and mark started itself, and never claims
//! without presenting its fencing token.

mod bounds;
mod claim;
mod clock;
mod compose;
pub mod context;
pub mod deferred;
mod error;
mod handoff;
mod hold_checks;
mod last_check;
mod mark;
mod outcome;
mod phases;
mod pipeline;
mod record;
mod relay;
mod send;
mod timings;
mod unsent;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::OnBackendError;
use crate::db;
use crate::db::locks::Fence;
use crate::db::runs::{NewRun, RunOutcome};
use crate::lock::{Acquisition, LeaseGuard, Released};
pub use claim::choose::{Chosen, Pick, Statement, statements};
use context::Context;
pub use error::TickError;
pub(crate) use error::db_err;
pub use outcome::{Summary, TickOutcome};
use pipeline::{Pipeline, Stop};

pub use clock::SLOT_WAIT_MAX;
use clock::{closed_opening, today_at, window_closes};

/// The lock a tick works under: its token is recorded in `job_runs`, its
/// fence presented with every claim.
#[derive(Debug, Clone, Copy)]
pub struct TickLock<'a> {
    pub lock_token: Uuid,
    pub fence: Fence<'a>,
}

/// One tick now: take the lock, work, release.
pub async fn run_tick(
    ctx: &Context,
    shutdown: &CancellationToken,
) -> Result<TickOutcome, TickError> {
    run_tick_at(ctx, shutdown, None).await
}

/// One tick for the cron fire scheduled at `slot` (by this replica's
/// clock): "today" is read once the database clock has reached it, so a
/// replica whose clock runs ahead works the slot's day, not the day before.
pub async fn run_tick_at(
    ctx: &Context,
    shutdown: &CancellationToken,
    slot: Option<DateTime<Utc>>,
) -> Result<TickOutcome, TickError> {
    let result = lock_and_work(ctx, shutdown, slot).await;
    ctx.metrics.tick_ended(match &result {
        Ok(outcome) => outcome.label(),
        Err(TickError::Lock(_)) => "backend_unavailable",
        Err(_) => "error",
    });
    result
}

async fn lock_and_work(
    ctx: &Context,
    shutdown: &CancellationToken,
    slot: Option<DateTime<Utc>>,
) -> Result<TickOutcome, TickError> {
    ctx.deferred.flush(&ctx.db, ctx.settings.lock.ttl).await;
    // Once per process, when the database first answers: the source has
    // the contract's columns (see `db::source`).
    db::source::check(&ctx.db).await.map_err(|e| match e {
        e @ db::source::SourceError::Contract(_) => TickError::Source(e.to_string()),
        db::source::SourceError::Database(source) => TickError::Database {
            doing: "checking source.relation",
            source,
        },
    })?;
    // Fencing tokens must stay above every token any holder has drawn, even
    // if the lock backend lost its counter.
    let fence_floor = db::locks::fence_high_water(&ctx.db, ctx.lock.key())
        .await
        .map_err(db_err("reading the fencing high-water mark"))?;
    let acquisition = ctx.lock.try_acquire(fence_floor).await;
    ctx.metrics.lock_acquisition(match &acquisition {
        Ok(Acquisition::Acquired(_)) => "acquired",
        Ok(Acquisition::Held) => "held",
        Ok(Acquisition::Unknown) => "unknown",
        Err(_) => "error",
    });
    let lease = match acquisition {
        Ok(Acquisition::Acquired(lease)) => lease,
        Ok(Acquisition::Held) => {
            tracing::info!("lock held, skipping");
            return Ok(TickOutcome::LockHeld);
        }
        Ok(Acquisition::Unknown) => {
            tracing::warn!(
                "lock result unknown (reply lost) and the key is not ours; skipping this tick"
            );
            return Ok(TickOutcome::LockUnknown);
        }
        Err(e)
            if !e.is_configuration()
                && ctx.settings.lock.on_backend_error == OnBackendError::DatabaseOnly =>
        {
            tracing::warn!(
                error = %e,
                "lock unavailable; working under the database backstop alone (lock.on_backend_error = \"database-only\")"
            );
            return work(ctx, None, &LeaseGuard::unbounded(), shutdown, slot).await;
        }
        Err(e) => return Err(e.into()),
    };
    let token = lease.token();
    let tick_lock = TickLock {
        lock_token: token,
        fence: Fence {
            lock_key: ctx.lock.key(),
            token: lease.fence(),
            holder: token,
        },
    };
    ctx.metrics.set_lock_held(true);
    let result = work(ctx, Some(tick_lock), &lease.guard(), shutdown, slot).await;
    let released = lease.release().await;
    ctx.metrics.set_lock_held(false);
    match released {
        Ok(Released::Deleted) => tracing::debug!(%token, "lock released"),
        Ok(Released::HeldForMinHold(left)) => {
            tracing::debug!(%token, hold_ms = left.as_millis() as u64, "lock left to expire at min_hold")
        }
        Ok(Released::NotOwner) => tracing::debug!(%token, "lock was no longer ours at release"),
        Err(e) => {
            tracing::warn!(%token, error = %e, "lock release failed; the key expires by its TTL")
        }
    }
    result
}

/// The work of a tick once it may run: `guard` says whether the lease is
/// still trusted, `shutdown` whether to stop early. `tick_lock` is None when
/// running without a lock (database-only mode, backstop tests).
pub async fn work_period(
    ctx: &Context,
    tick_lock: Option<TickLock<'_>>,
    guard: &LeaseGuard,
    shutdown: &CancellationToken,
) -> Result<TickOutcome, TickError> {
    work(ctx, tick_lock, guard, shutdown, None).await
}

async fn work(
    ctx: &Context,
    tick_lock: Option<TickLock<'_>>,
    guard: &LeaseGuard,
    shutdown: &CancellationToken,
    slot: Option<DateTime<Utc>>,
) -> Result<TickOutcome, TickError> {
    let started = Instant::now();
    ctx.mailer.restore_pool_size(); // a relay's refusals shrink the pool for one tick only
    relay::before_tick(ctx, started).await;
    let settings = &ctx.settings;
    let (now, today) = today_at(ctx, slot).await?;
    // Outside the send window nothing is claimed; inside it, the tick stops
    // handing mail to the relay when the window closes. When rows name
    // their own zone or calendar, each row's window decides, at the claim
    // and before its mail.
    let (closes, closed_for_most) = match ctx.db.names().local_columns() {
        true => (None, closed_opening(settings, now)),
        false => match window_closes(settings, now) {
            Ok(closes) => (closes, None),
            Err(opens) => return Ok(TickOutcome::OutsideWindow { opens }),
        },
    };
    // job_runs.run_date is the tick's "today"; each claim's period is its step.
    let run_date = today.to_string();
    let run_id = db::runs::start_run(
        &ctx.db,
        NewRun {
            replica_id: &settings.replica_id,
            lock: tick_lock.map(|h| (h.lock_token, h.fence.token, h.fence.lock_key)),
            run_date: &run_date,
            lease: Some(settings.lock.ttl),
        },
    )
    .await
    .map_err(db_err("recording the run"))?;
    let fence = tick_lock.map(|h| h.fence);
    // How reminders are grouped into mails: chosen once, here.
    let grouping = claim::grouping_for(&settings.reminders);
    let pipeline = std::sync::Arc::new(
        Pipeline::new(
            ctx,
            fence,
            guard,
            shutdown,
            (now, today),
            run_id,
            grouping.rows_per_letter(),
        )
        .closing_at(closes),
    );
    async {
        let result = phases::claim_send_record(&pipeline, grouping).await;
        let outcome = finish(&pipeline, result, started).await;
        // The window of rows without a zone of their own was closed and no
        // one else's was open: as outside the window.
        match (outcome, closed_for_most) {
            (Ok(TickOutcome::Done(s)), Some(opens)) if s.counts.claimed == 0 => {
                Ok(TickOutcome::OutsideWindow { opens })
            }
            (outcome, _) => outcome,
        }
    }
    .instrument(tracing::info_span!("tick", run_id, run_date = %run_date))
    .await
}

/// Hands back what never started, records the run and logs its summary.
async fn finish(
    p: &Pipeline,
    result: Result<(), TickError>,
    started: Instant,
) -> Result<TickOutcome, TickError> {
    let (ctx, run_id) = (p.ctx(), p.run_id());
    let unsent = p.unsent().take();
    let mut counts = p.counts();
    match db::returned::hand_back(&ctx.db, run_id, &unsent.ids, &unsent.fresh).await {
        Ok(n) => counts.handed_back = u32::try_from(n).unwrap_or(u32::MAX),
        Err(_) => ctx.deferred.hand_back(run_id, unsent),
    }
    report_problems(p);
    // Letters handed back because their customer's window closed end the
    // run as a closing window would.
    let stop = p
        .stop_reason()
        .or_else(|| p.closed_windows().then_some(Stop::WindowClosed));
    let (outcome, error) = match (&result, stop) {
        (_, Some(Stop::RecordFailed)) => (
            RunOutcome::RecordFailed,
            result.as_ref().err().map(ToString::to_string),
        ),
        // A lost lease usually causes the error beside it (a replica
        // resumed after a pause finds its statements past their deadline):
        // the run ended because the lock was lost; the error is kept.
        (_, Some(Stop::Lost(_))) => (
            RunOutcome::LostLock,
            result.as_ref().err().map(ToString::to_string),
        ),
        (Err(e), _) => (RunOutcome::Error, Some(e.to_string())),
        (Ok(()), Some(Stop::Shutdown)) => (RunOutcome::Shutdown, None),
        (Ok(()), Some(Stop::SmtpDown)) => (RunOutcome::SmtpUnavailable, None),
        (Ok(()), Some(Stop::SmtpAuth)) => (RunOutcome::SmtpAuthFailed, None),
        (Ok(()), Some(Stop::Throttled)) => (RunOutcome::Throttled, None),
        (Ok(()), Some(Stop::WindowClosed)) => (RunOutcome::WindowClosed, None),
        (Ok(()), None) => (RunOutcome::Done, None),
    };
    let end = db::runs::RunEnd {
        outcome,
        counts: &counts,
        error: error.as_deref(),
        keeping_results: ctx.deferred.keeps_results_of(run_id),
    };
    if db::runs::finish_run(&ctx.db, run_id, end).await.is_err() {
        ctx.deferred.finish(run_id, outcome, counts, error.clone());
    }
    // Housekeeping once the run's mail is done and recorded, still under
    // the lock (the tick's duration includes it); only after a tick that
    // went well, never adding a deadline's wait to one that met a failing
    // database.
    if outcome == RunOutcome::Done {
        refresh_statistics(p, counts.claimed).await;
    }
    let took = started.elapsed();
    relay::after_tick(ctx).await;
    // A throttled tick did its work as far as the relay let it: a success.
    let succeeded = matches!(
        outcome,
        RunOutcome::Done | RunOutcome::Throttled | RunOutcome::WindowClosed
    );
    ctx.metrics.tick_worked(&counts, took, succeeded);
    let summary = Summary {
        run_id,
        run_date: p.run_date().to_owned(),
        counts,
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        waits: p.timings().waits(),
        hold_reads: p.hold_checks().reads(),
    };
    ctx.metrics.send_waits(&summary.waits);
    summary.log(outcome.as_str());
    Ok(match outcome {
        RunOutcome::RecordFailed => TickOutcome::RecordFailed(summary),
        RunOutcome::LostLock => TickOutcome::LockLost(summary),
        _ => {
            result?;
            match outcome {
                RunOutcome::Shutdown => TickOutcome::Shutdown(summary),
                RunOutcome::SmtpUnavailable => TickOutcome::SmtpUnavailable(summary),
                RunOutcome::SmtpAuthFailed => TickOutcome::SmtpAuthFailed(summary),
                RunOutcome::Throttled => TickOutcome::Throttled(summary),
                RunOutcome::WindowClosed => TickOutcome::WindowClosed(summary),
                _ => TickOutcome::Done(summary),
            }
        }
    })
}

/// After a tick that claimed much of the table, the planner's statistics
/// of `reminders` (`db::stats`): never an error, the tick's work is done.
async fn refresh_statistics(p: &Pipeline, claimed: u32) {
    match db::stats::refresh_after_tick(&p.ctx().db, u64::from(claimed)).await {
        Ok(true) => tracing::debug!(claimed, "statistics of the reminders table refreshed"),
        Ok(false) => {}
        Err(e) => tracing::debug!(
            error = %e,
            "could not refresh the statistics of the reminders table (autovacuum will)"
        ),
    }
}

/// One warning per tick for the source rows skipped, with a few examples,
/// and their count by problem in the metrics.
fn report_problems(p: &Pipeline) {
    let problems = p.problems();
    let total = problems.total();
    if total == 0 {
        return;
    }
    for (problem, n) in problems.by_problem() {
        p.ctx().metrics.source_problems(problem.label(), n);
    }
    tracing::warn!(
        source_problems = total,
        examples = %problems.describe_examples(),
        "source rows skipped: they cannot make a reminder until fixed in source.relation (`invoice-reminder check-source` lists them)"
    );
}
