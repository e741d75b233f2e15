//! The job: one tick, from taking the lock to the summary line.
//!
//! ```text
//! try_acquire ──held──▶ LockHeld (normal; another replica works this tick)
//!      │
//!   acquired ──▶ start_run ──▶ period from the DB clock
//!      │
//!      ├─ claim: reclaim `failed` rows, then page overdue ──▶ claim_batch
//!      ├─ send:  claimed rows, send_concurrency at a time     } three overlapping
//!      ├─ record: delivery results, one statement per chunk  } stages
//!      │        (before every mail: lease valid? shutdown? SMTP reachable?)
//!      ├─ hand back rows never started
//!      ▼
//! finish_run ──▶ stop watchdog ──▶ release (or hold until min_hold)
//! ```
//!
//! [`run_tick`] takes the lock; [`work_period`] is the part after it and can
//! be called with any [`LeaseGuard`] (tests use it to bypass the lock and
//! prove that the database alone prevents duplicates).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use chrono::NaiveDate;
use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::OnBackendError;
use crate::context::Context;
use crate::db;
use crate::db::invoices::OverdueKey;
use crate::db::reminders::{ClaimError, ClaimedReminder, Delivery, Fence};
use crate::db::runs::{RunCounts, RunOutcome};
use crate::lock::{Acquisition, LeaseGuard, LockError, LostReason, Released};
use crate::mailer::{self, SendError};
use crate::period::period_key;

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
    pub fn summary(&self) -> Option<&Summary> {
        match self {
            Self::Done(s) | Self::LockLost(s) | Self::Shutdown(s) | Self::SmtpUnavailable(s) => {
                Some(s)
            }
            Self::LockHeld | Self::LockUnknown => None,
        }
    }
}

/// Counters of one tick, logged as its summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub run_id: i64,
    pub period: String,
    /// Rows this run claimed (new claims and retries).
    pub claimed: u32,
    pub sent: u32,
    /// Transient failures, retried on a later tick.
    pub failed: u32,
    /// Final failures: permanent rejections, invalid data, last attempts.
    pub discarded: u32,
    /// Sends whose result is unknown (left `sending`).
    pub unknown: u32,
    /// Overdue invoices on our pages that someone else had already claimed
    /// or that were paid meanwhile.
    pub skipped: u32,
    /// Claimed rows returned unstarted (lost lease, shutdown, SMTP down).
    pub handed_back: u32,
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

fn db_err(doing: &'static str) -> impl FnOnce(sqlx::Error) -> TickError {
    move |source| TickError::Database { doing, source }
}

/// One tick: take the lock, work the period, release.
pub async fn run_tick(
    ctx: &Context,
    shutdown: &CancellationToken,
) -> Result<TickOutcome, TickError> {
    ctx.flush_deferred().await;
    // Fencing tokens must stay above what the database has seen, even if
    // the lock backend lost its counter.
    let fence_floor = db::locks::fence_high_water(&ctx.db, ctx.lock.key())
        .await
        .map_err(db_err("reading the fencing high-water mark"))?;
    let acquisition = match ctx.lock.try_acquire(fence_floor).await {
        Ok(acquisition) => acquisition,
        Err(e) => match ctx.settings.lock.on_backend_error {
            OnBackendError::Skip => return Err(e.into()),
            OnBackendError::DatabaseOnly => {
                tracing::warn!(
                    error = %e,
                    "lock unavailable; working under the database backstop alone (lock.on_backend_error = \"database-only\")"
                );
                return work_period(ctx, None, &LeaseGuard::unbounded(), shutdown).await;
            }
        },
    };
    let lease = match acquisition {
        Acquisition::Acquired(lease) => lease,
        Acquisition::Held => {
            tracing::info!("lock held, skipping");
            return Ok(TickOutcome::LockHeld);
        }
        Acquisition::Unknown => {
            tracing::warn!(
                "lock result unknown (reply lost) and the key is not ours; skipping this tick"
            );
            return Ok(TickOutcome::LockUnknown);
        }
    };
    let token = lease.token();
    let guard = lease.guard();
    let holding = Holding {
        token,
        fence: lease.fence(),
        lock_key: ctx.lock.key(),
    };
    let result = work_period(ctx, Some(holding), &guard, shutdown).await;
    match lease.release().await {
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

/// Why a tick stopped starting new mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Lost(LostReason),
    Shutdown,
    SmtpDown,
}

/// The lock a tick works under: recorded in `job_runs` and, for the fencing
/// token, presented with every claim.
#[derive(Debug, Clone, Copy)]
pub struct Holding<'a> {
    pub token: Uuid,
    pub fence: i64,
    pub lock_key: &'a str,
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
    let period = period_key(today, settings.reminders.cadence);
    let run_id = db::runs::start_run(
        &ctx.db,
        &settings.replica_id,
        holding.map(|h| h.token),
        holding.map(|h| h.fence),
        &period,
    )
    .await
    .map_err(db_err("recording the run"))?;
    let span = tracing::info_span!("tick", run_id, period = %period);
    let tick = Tick {
        ctx,
        fence: holding.map(|h| Fence {
            lock_key: h.lock_key,
            token: h.fence,
        }),
        guard,
        shutdown,
        today,
        run_id,
        period,
        smtp_down: AtomicBool::new(false),
        counters: Counters::default(),
        unrecorded: Semaphore::new(2 * settings.reminders.batch_size as usize),
        still_sending: Mutex::new(Vec::new()),
    };
    tick.run(started).instrument(span).await
}

impl Tick<'_> {
    /// Runs the stages, hands back what never started, records the run and
    /// logs its summary line.
    async fn run(&self, started: Instant) -> Result<TickOutcome, TickError> {
        let (ctx, run_id) = (self.ctx, self.run_id);
        let result = self.claim_and_send().await;
        let still_sending = std::mem::take(&mut *self.still_sending());
        let handed_back =
            match db::reminders::hand_back_unattempted(&ctx.db, run_id, &still_sending).await {
                Ok(n) => n as u32,
                Err(_) => {
                    ctx.defer_hand_back(run_id, still_sending);
                    0
                }
            };
        let summary =
            self.counters
                .summary(run_id, self.period.clone(), handed_back, started.elapsed());
        let counts = RunCounts {
            claimed: summary.claimed,
            sent: summary.sent,
            failed: summary.failed + summary.discarded,
        };
        let (outcome, error) = match &result {
            Err(e) => (RunOutcome::Error, Some(e.to_string())),
            Ok(()) => match self.stop_reason() {
                Some(Stop::Lost(_)) => (RunOutcome::LostLock, None),
                Some(Stop::Shutdown) => (RunOutcome::Shutdown, None),
                Some(Stop::SmtpDown) => (RunOutcome::SmtpUnavailable, None),
                None => (RunOutcome::Done, None),
            },
        };
        if db::runs::finish_run(&ctx.db, run_id, outcome, counts, error.as_deref())
            .await
            .is_err()
        {
            ctx.defer_finish(run_id, outcome, counts, error.clone());
        }
        tracing::info!(
            outcome = outcome.as_str(),
            period = %summary.period,
            claimed = summary.claimed,
            sent = summary.sent,
            failed = summary.failed,
            discarded = summary.discarded,
            unknown = summary.unknown,
            skipped = summary.skipped,
            handed_back = summary.handed_back,
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
}

/// Outcomes of a tick in progress, shared by its three stages.
#[derive(Default)]
struct Counters {
    claimed: AtomicU32,
    skipped: AtomicU32,
    sent: AtomicU32,
    failed: AtomicU32,
    discarded: AtomicU32,
    unknown: AtomicU32,
}

impl Counters {
    fn add(counter: &AtomicU32, n: u32) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn summary(&self, run_id: i64, period: String, handed_back: u32, took: Duration) -> Summary {
        let get = |c: &AtomicU32| c.load(Ordering::Relaxed);
        Summary {
            run_id,
            period,
            claimed: get(&self.claimed),
            sent: get(&self.sent),
            failed: get(&self.failed),
            discarded: get(&self.discarded),
            unknown: get(&self.unknown),
            skipped: get(&self.skipped),
            handed_back,
            duration_ms: took.as_millis() as u64,
        }
    }
}

/// Returns permits to the claim bound when dropped.
struct PermitsBack<'a>(&'a Semaphore, usize);

impl Drop for PermitsBack<'_> {
    fn drop(&mut self) {
        self.0.add_permits(self.1);
    }
}

/// How long a delivery result may wait before it is written with others.
const RECORD_EVERY: Duration = Duration::from_millis(200);

/// The state of one tick in progress.
///
/// A tick is a pipeline of three stages that run concurrently:
/// **claim** (page overdue invoices, claim a batch, hand it on; at most one
/// batch ahead of the sender), **send** (a stream of claimed reminders,
/// `send_concurrency` at a time over the SMTP pool) and **record** (delivery
/// results written in one statement per `batch_size` results or per
/// [`RECORD_EVERY`], whichever comes first). Per message the order is
/// unchanged: its claim is committed before it is sent, and its status is
/// written after the server answered. The database and SMTP work overlap,
/// so a large backlog moves at the pace of the slower of the two.
struct Tick<'a> {
    ctx: &'a Context,
    /// Presented with every claim; None without a lock.
    fence: Option<Fence<'a>>,
    guard: &'a LeaseGuard,
    shutdown: &'a CancellationToken,
    /// The database's date, for the period and "days overdue".
    today: NaiveDate,
    run_id: i64,
    period: String,
    /// Set when a connection to the SMTP server could not be made: the rest
    /// of the tick is handed back rather than failed one by one.
    smtp_down: AtomicBool,
    counters: Counters,
    /// Rows claimed but not yet recorded may never exceed 2 × batch_size:
    /// the claimer takes permits before it claims, the recorder gives them
    /// back once results are written. This bounds what a SIGKILL can leave
    /// in `sending`.
    unrecorded: Semaphore,
    /// Rows this run attempted that legitimately stay `sending`: unknown
    /// deliveries, and rows whose result could not be written yet. Every
    /// other row the run still holds in `sending` at the end never started
    /// and is handed back. Small: it does not grow with the backlog.
    still_sending: Mutex<Vec<i64>>,
}

/// What happened to one claimed row in this tick.
enum Attempt {
    /// The send never started; the end-of-run sweep hands the row back.
    NotStarted,
    Finished(i64, Delivery),
}

impl Tick<'_> {
    fn stop_reason(&self) -> Option<Stop> {
        if let Err(reason) = self.guard.check() {
            return Some(Stop::Lost(reason));
        }
        if self.shutdown.is_cancelled() {
            return Some(Stop::Shutdown);
        }
        if self.smtp_down.load(Ordering::SeqCst) {
            return Some(Stop::SmtpDown);
        }
        None
    }

    fn still_sending(&self) -> std::sync::MutexGuard<'_, Vec<i64>> {
        self.still_sending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the three stages until the claimer runs out of work (or stops)
    /// and everything it claimed has been attempted and recorded.
    async fn claim_and_send(&self) -> Result<(), TickError> {
        let settings = &self.ctx.settings.reminders;
        let (batches, claimed) = mpsc::channel::<Vec<ClaimedReminder>>(1);
        let (results, to_record) = mpsc::channel::<Vec<(i64, Delivery)>>(1);

        let claiming = async move {
            let claimed = self.claim_all(&batches).await;
            drop(batches);
            claimed
        };
        let sending = async move {
            let reminders = tokio_stream::wrappers::ReceiverStream::new(claimed)
                .flat_map(futures::stream::iter);
            let outcomes = reminders
                .map(|reminder| self.attempt(reminder))
                .buffer_unordered(settings.send_concurrency as usize)
                .filter_map(|attempt| {
                    futures::future::ready(match attempt {
                        Attempt::Finished(id, delivery) => Some((id, delivery)),
                        Attempt::NotStarted => {
                            // Nothing to record: the end-of-run sweep hands it back.
                            self.unreserve(1);
                            None
                        }
                    })
                });
            let chunks = tokio_stream::StreamExt::chunks_timeout(
                outcomes,
                settings.batch_size as usize,
                RECORD_EVERY,
            );
            let mut chunks = std::pin::pin!(chunks);
            while let Some(chunk) = futures::StreamExt::next(&mut chunks).await {
                if results.send(chunk).await.is_err() {
                    break;
                }
            }
            drop(results);
        };
        let recording = self.record_all(to_record);

        let (claimed, (), recorded) = tokio::join!(claiming, sending, recording);
        claimed.and(recorded)
    }

    /// The claim stage: retries first (they have waited longest), then new
    /// reminders page by page, each claimed batch handed to the sender.
    async fn claim_all(
        &self,
        batches: &mpsc::Sender<Vec<ClaimedReminder>>,
    ) -> Result<(), TickError> {
        let s = &self.ctx.settings.reminders;
        let (batch_size, max_attempts) = (s.batch_size, s.max_attempts);

        while self.stop_reason().is_none() {
            let Some(limit) = self.room(batch_size) else {
                return Ok(());
            };
            self.reserve(limit).await;
            let reclaimed = db::reminders::reclaim_failed(
                &self.ctx.db,
                &self.period,
                self.run_id,
                max_attempts,
                limit,
                self.fence,
            )
            .await;
            let Some(batch) = self.fenced(reclaimed, "re-claiming failed reminders")? else {
                return Ok(());
            };
            self.unreserve(limit as usize - batch.len());
            if batch.is_empty() {
                break;
            }
            if !self.hand_on(batches, batch).await {
                return Ok(());
            }
        }

        let cutoff = s.overdue_cutoff(self.today);
        let mut after: Option<OverdueKey> = None;
        while self.stop_reason().is_none() {
            let Some(limit) = self.room(batch_size) else {
                return Ok(());
            };
            let page =
                db::invoices::fetch_overdue_page(&self.ctx.db, cutoff, &self.period, after, limit)
                    .await
                    .map_err(db_err("reading overdue invoices"))?;
            let Some(last) = page.last().copied() else {
                break;
            };
            after = Some(last);
            if self.stop_reason().is_some() {
                break;
            }
            let ids: Vec<i64> = page.iter().map(|k| k.id).collect();
            self.reserve(limit).await;
            let claimed = db::reminders::claim_batch(
                &self.ctx.db,
                &ids,
                &self.period,
                self.run_id,
                self.fence,
            )
            .await;
            let Some(claimed) = self.fenced(claimed, "claiming reminders")? else {
                break;
            };
            self.unreserve(limit as usize - claimed.len());
            Counters::add(&self.counters.skipped, (ids.len() - claimed.len()) as u32);
            if !self.hand_on(batches, claimed).await {
                break;
            }
            if page.len() < limit as usize {
                break;
            }
        }
        Ok(())
    }

    /// Waits until `n` more rows may be claimed without exceeding the bound
    /// on claimed-but-unrecorded rows.
    async fn reserve(&self, n: u32) {
        if let Ok(permits) = self.unrecorded.acquire_many(n).await {
            permits.forget();
        }
    }

    fn unreserve(&self, n: usize) {
        self.unrecorded.add_permits(n);
    }

    /// Passes a claimed batch to the sender; false if the sender is gone.
    async fn hand_on(
        &self,
        batches: &mpsc::Sender<Vec<ClaimedReminder>>,
        batch: Vec<ClaimedReminder>,
    ) -> bool {
        Counters::add(&self.counters.claimed, batch.len() as u32);
        batch.is_empty() || batches.send(batch).await.is_ok()
    }

    /// How many rows the next claim may take: `batch_size`, or less near
    /// `reminders.max_per_tick`; None once the tick's share is claimed.
    fn room(&self, batch_size: u32) -> Option<u32> {
        let Some(max) = self.ctx.settings.reminders.max_per_tick else {
            return Some(batch_size);
        };
        let left = max.saturating_sub(self.counters.claimed.load(Ordering::Relaxed));
        if left == 0 {
            tracing::info!(
                max_per_tick = max,
                "reminders.max_per_tick reached; the rest waits for the next tick"
            );
            return None;
        }
        Some(left.min(batch_size))
    }

    /// A refused claim means a newer holder exists: the lease is lost.
    fn fenced(
        &self,
        claimed: Result<Vec<ClaimedReminder>, ClaimError>,
        doing: &'static str,
    ) -> Result<Option<Vec<ClaimedReminder>>, TickError> {
        match claimed {
            Ok(rows) => Ok(Some(rows)),
            Err(ClaimError::Fenced { token }) => {
                tracing::warn!(
                    fence = token,
                    "claim refused: a newer lock holder has written; stopping"
                );
                self.guard.lose(LostReason::Fenced);
                Ok(None)
            }
            Err(ClaimError::Database(e)) => Err(db_err(doing)(e)),
        }
    }

    /// The record stage: one statement per chunk of results. A chunk that
    /// cannot be written is kept for the next tick (see `Context`), and its
    /// rows stay out of the end-of-run hand-back.
    async fn record_all(
        &self,
        mut to_record: mpsc::Receiver<Vec<(i64, Delivery)>>,
    ) -> Result<(), TickError> {
        let max_attempts = self.ctx.settings.reminders.max_attempts;
        let mut failure = None;
        while let Some(deliveries) = to_record.recv().await {
            // Written or kept for later: either way no longer in flight here.
            let _written = PermitsBack(&self.unrecorded, deliveries.len());
            self.still_sending().extend(
                deliveries
                    .iter()
                    .filter(|(_, d)| matches!(d, Delivery::Unknown { .. }))
                    .map(|(id, _)| *id),
            );
            match db::reminders::record_deliveries(
                &self.ctx.db,
                self.run_id,
                max_attempts,
                &deliveries,
            )
            .await
            {
                Ok(r) => {
                    let c = &self.counters;
                    Counters::add(&c.sent, r.sent);
                    Counters::add(&c.failed, r.failed);
                    Counters::add(&c.discarded, r.discarded);
                    Counters::add(&c.unknown, r.unknown);
                }
                Err(e) => {
                    // The mail went out (or not) regardless; count it from
                    // what we know and write the rows when the database is back.
                    let c = &self.counters;
                    for (_, d) in &deliveries {
                        match d {
                            Delivery::Sent { .. } => Counters::add(&c.sent, 1),
                            Delivery::Failed { .. } | Delivery::Deferred { .. } => {
                                Counters::add(&c.failed, 1)
                            }
                            Delivery::Discarded { .. } => Counters::add(&c.discarded, 1),
                            Delivery::Unknown { .. } => Counters::add(&c.unknown, 1),
                        }
                    }
                    self.still_sending()
                        .extend(deliveries.iter().map(|(id, _)| *id));
                    self.ctx
                        .defer_deliveries(self.run_id, max_attempts, deliveries);
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(db_err("recording delivery results")(e)),
            None => Ok(()),
        }
    }

    /// One reminder: wait for a rate slot, check we may still send, build,
    /// send, classify.
    async fn attempt(&self, reminder: ClaimedReminder) -> Attempt {
        let id = reminder.reminder_id;
        self.ctx.mailer.pace().await;
        if let Some(stop) = self.stop_reason() {
            tracing::debug!(invoice_id = reminder.invoice_id, ?stop, "not sending");
            return Attempt::NotStarted;
        }
        let smtp = &self.ctx.settings.smtp;
        let mail = match mailer::build_message(smtp, &reminder, &self.period, self.today) {
            Ok(mail) => mail,
            Err(e) => {
                tracing::warn!(invoice_id = reminder.invoice_id, error = %e, "reminder discarded");
                return Attempt::Finished(
                    id,
                    Delivery::Discarded {
                        error: e.to_string(),
                    },
                );
            }
        };
        let delivery = match self.ctx.mailer.send(&mail).await {
            Ok(()) => Delivery::Sent {
                message_id: mail.message_id,
            },
            Err(e) => self.classify(reminder.invoice_id, e),
        };
        Attempt::Finished(id, delivery)
    }

    fn classify(&self, invoice_id: i64, e: SendError) -> Delivery {
        let error = e.to_string();
        match e {
            SendError::NotDelivered { connect: true, .. } => {
                if !self.smtp_down.swap(true, Ordering::SeqCst) {
                    tracing::error!(invoice_id, %error, "SMTP server unreachable; handing back the rest of this tick");
                }
                Delivery::Deferred { error }
            }
            SendError::NotDelivered {
                permanent: true, ..
            }
            | SendError::Refused {
                permanent: true, ..
            } => {
                tracing::warn!(invoice_id, %error, "reminder rejected permanently");
                Delivery::Discarded { error }
            }
            SendError::NotDelivered { .. } | SendError::Refused { .. } => {
                tracing::warn!(invoice_id, %error, "reminder failed; will retry on a later tick");
                Delivery::Failed { error }
            }
            SendError::Unknown { .. } => {
                tracing::error!(invoice_id, %error, "delivery unknown; the reminder stays 'sending' and is not retried");
                Delivery::Unknown { error }
            }
        }
    }
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
