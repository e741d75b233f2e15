//! The job: one tick, from taking the lock to the summary line.
//!
//! ```text
//! try_acquire ──held──▶ LockHeld (normal; another replica works this tick)
//!      │
//!   acquired ──▶ start_run ──▶ period from the DB clock
//!      │
//!      ├─ claim ─▶ send ─▶ record   three overlapping stages (pipeline.rs);
//!      │          before every mail: lease valid? shutdown? SMTP reachable?
//!      ├─ hand back rows never started
//!      ▼
//! finish_run ──▶ stop watchdog ──▶ release (or hold until min_hold)
//! ```
//!
//! [`run_tick`] takes the lock; [`work_period`] is the part after it and can
//! be called with any [`LeaseGuard`] (tests use it to bypass the lock and
//! prove that the database alone prevents duplicates). A tick never sends a
//! reminder it did not claim itself, and never claims without presenting its
//! fencing token.

pub mod deferred;
mod pipeline;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::OnBackendError;
use crate::context::Context;
use crate::db;
use crate::db::reminders::Fence;
use crate::db::runs::RunOutcome;
use crate::domain::Counts;
use crate::lock::{Acquisition, LeaseGuard, LockError, Released};
use pipeline::{Pipeline, Stop};

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum TickOutcome {
    /// All owed reminders were attempted.
    Done(Summary),
    /// Another replica holds the lock; nothing to do.
    LockHeld,
    /// The SET's reply was lost and the key is not ours; skipped.
    LockUnknown,
    /// The lease was lost mid-tick; no mail was started after that.
    LockLost(Summary),
    /// Shutdown was requested mid-tick; mail in flight finished.
    Shutdown(Summary),
    /// The SMTP server could not be reached; the rest was handed back.
    SmtpUnavailable(Summary),
}

impl TickOutcome {
    /// The `outcome` label of `invoice_reminder_ticks_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Done(_) => "done",
            Self::LockHeld => "lock_held",
            Self::LockUnknown => "lock_unknown",
            Self::LockLost(_) => "lost_lock",
            Self::Shutdown(_) => "shutdown",
            Self::SmtpUnavailable(_) => "smtp_unavailable",
        }
    }

    pub fn summary(&self) -> Option<&Summary> {
        match self {
            Self::Done(s) | Self::LockLost(s) | Self::Shutdown(s) | Self::SmtpUnavailable(s) => {
                Some(s)
            }
            Self::LockHeld | Self::LockUnknown => None,
        }
    }
}

/// A tick that ran: which run and period, what it did, how long it took.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub run_id: i64,
    pub period: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub duration_ms: u64,
}

/// Errors that end a tick early. The lock is released in every case.
#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("database error while {doing}: {}", describe_db_error(source))]
    Database {
        doing: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

/// sqlx's pool timeout hides its cause; say what it usually means.
fn describe_db_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::PoolTimedOut => {
            "no connection to PostgreSQL within database.connect_timeout (is it reachable?)"
                .to_owned()
        }
        other => other.to_string(),
    }
}

pub(crate) fn db_err(doing: &'static str) -> impl FnOnce(sqlx::Error) -> TickError {
    move |source| TickError::Database { doing, source }
}

/// The lock a tick works under: its token is recorded in `job_runs`, its
/// fence presented with every claim.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    pub lock_token: Uuid,
    pub fence: Fence<'a>,
}

/// One tick: take the lock, work the period, release.
pub async fn run_tick(
    ctx: &Context,
    shutdown: &CancellationToken,
) -> Result<TickOutcome, TickError> {
    let result = lock_and_work(ctx, shutdown).await;
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
) -> Result<TickOutcome, TickError> {
    ctx.deferred.flush(&ctx.db).await;
    // Fencing tokens must stay above what the database has seen, even if
    // the lock backend lost its counter.
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
        Err(e) if ctx.settings.lock.on_backend_error == OnBackendError::DatabaseOnly => {
            tracing::warn!(
                error = %e,
                "lock unavailable; working under the database backstop alone (lock.on_backend_error = \"database-only\")"
            );
            return work_period(ctx, None, &LeaseGuard::unbounded(), shutdown).await;
        }
        Err(e) => return Err(e.into()),
    };
    let token = lease.token();
    let holding = Holding {
        lock_token: token,
        fence: Fence {
            lock_key: ctx.lock.key(),
            token: lease.fence(),
        },
    };
    ctx.metrics.set_lock_held(true);
    let result = work_period(ctx, Some(holding), &lease.guard(), shutdown).await;
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
/// still trusted, `shutdown` whether to stop early. `holding` is None when
/// running without a lock (database-only mode, backstop tests).
pub async fn work_period(
    ctx: &Context,
    holding: Option<Holding<'_>>,
    guard: &LeaseGuard,
    shutdown: &CancellationToken,
) -> Result<TickOutcome, TickError> {
    let started = Instant::now();
    let settings = &ctx.settings;
    let today = db::today(&ctx.db, settings.schedule.timezone)
        .await
        .map_err(db_err("reading the database clock"))?;
    // job_runs.period is the tick's "today"; each claim's period is its step.
    let period = today.to_string();
    let run_id = db::runs::start_run(
        &ctx.db,
        &settings.replica_id,
        holding.map(|h| h.lock_token),
        holding.map(|h| h.fence.token),
        &period,
    )
    .await
    .map_err(db_err("recording the run"))?;
    let fence = holding.map(|h| h.fence);
    let pipeline = Pipeline::new(ctx, fence, guard, shutdown, today, run_id, &period);
    async {
        let result = pipeline.claim_send_record().await;
        finish(&pipeline, result, started).await
    }
    .instrument(tracing::info_span!("tick", run_id, period = %period))
    .await
}

/// Hands back what never started, records the run and logs its summary.
async fn finish(
    p: &Pipeline<'_>,
    result: Result<(), TickError>,
    started: Instant,
) -> Result<TickOutcome, TickError> {
    let (ctx, run_id) = (p.ctx, p.run_id);
    let still_sending = p.take_still_sending();
    let mut counts = p.counts();
    match db::reminders::hand_back_unattempted(&ctx.db, run_id, &still_sending).await {
        Ok(n) => counts.handed_back = n as u32,
        Err(_) => ctx.deferred.hand_back(run_id, still_sending),
    }
    let (outcome, error) = match &result {
        Err(e) => (RunOutcome::Error, Some(e.to_string())),
        Ok(()) => match p.stop_reason() {
            Some(Stop::Lost(_)) => (RunOutcome::LostLock, None),
            Some(Stop::Shutdown) => (RunOutcome::Shutdown, None),
            Some(Stop::SmtpDown) => (RunOutcome::SmtpUnavailable, None),
            None => (RunOutcome::Done, None),
        },
    };
    if db::runs::finish_run(&ctx.db, run_id, outcome, &counts, error.as_deref())
        .await
        .is_err()
    {
        ctx.deferred.finish(run_id, outcome, counts, error.clone());
    }
    let took = started.elapsed();
    ctx.metrics
        .tick_worked(&counts, took, outcome == RunOutcome::Done);
    let summary = Summary {
        run_id,
        period: p.period.to_owned(),
        counts,
        duration_ms: took.as_millis() as u64,
    };
    tracing::info!(
        outcome = outcome.as_str(),
        period = %summary.period,
        claimed = counts.claimed,
        sent = counts.sent,
        failed = counts.failed,
        discarded = counts.discarded,
        unknown = counts.unknown,
        skipped = counts.skipped,
        handed_back = counts.handed_back,
        duration_ms = summary.duration_ms,
        "tick finished"
    );
    result?;
    Ok(match outcome {
        RunOutcome::LostLock => TickOutcome::LockLost(summary),
        RunOutcome::Shutdown => TickOutcome::Shutdown(summary),
        RunOutcome::SmtpUnavailable => TickOutcome::SmtpUnavailable(summary),
        RunOutcome::Done | RunOutcome::Error => TickOutcome::Done(summary),
    })
}
