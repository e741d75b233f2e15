//! The three stages of a tick, running concurrently: **claim** (`claim.rs`:
//! owed invoices, page by page, at most one batch ahead of the sender),
//! **send** (`send.rs`: claimed reminders, started a few at a time,
//! `send_concurrency` at a time over the SMTP pool) and **record** (here:
//! results written in one statement per quarter of `batch_size`, or per
//! [`RECORD_EVERY`], whichever comes first). A backlog moves at the pace of
//! the slower of the database and SMTP; per message the order never
//! changes: claim committed, start recorded, send, status written.
//!
//! Guarantees: before every mail the lease, the shutdown signal, the SMTP
//! server and the database's acceptance of our writes are checked
//! ([`Pipeline::stop_reason`]); at most `2 × batch_size` rows are claimed
//! but not yet recorded at any moment, so that is all a SIGKILL can leave
//! in `sending`, and of those only the ones started (at most
//! `send_concurrency`) stay unknown: later ticks return the rest.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::NaiveDate;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::{TickError, db_err};
use crate::context::Context;
use crate::db;
use crate::db::invoices::Owed;
use crate::db::reminders::Fence;
use crate::domain::{Attempted, Claimed, Counts, ReminderId};
use crate::lock::{LeaseGuard, LostReason};
use crate::stages::Window;

/// How long a delivery result may wait before it is written with others.
pub(super) const RECORD_EVERY: Duration = Duration::from_millis(200);

/// Results are written in chunks of `batch_size / RECORD_CHUNKS_PER_BATCH`.
/// Claim permits come back only once results are written, and the claimer
/// needs a whole page of them: written per `batch_size`, the results waiting
/// took most of the `2 × batch_size` bound and the senders idled while the
/// next page was claimed. A statement per result instead cost more than it
/// saved on small backlogs. BENCHMARKS.md, "Fifth session", has the numbers.
const RECORD_CHUNKS_PER_BATCH: usize = 4;

/// Why a tick stopped starting new mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Lost(LostReason),
    Shutdown,
    /// No connection to the SMTP server could be made.
    SmtpDown,
    /// The SMTP server refused our login: a configuration problem.
    SmtpAuth,
    /// Results could not be written: sending more would pile up rows whose
    /// fate only this process knows.
    RecordFailed,
}

/// Stops raised by the stages themselves (the lease and shutdown have their
/// own signals); the first one wins.
const NO_STOP: u8 = 0;
const SMTP_DOWN: u8 = 1;
const SMTP_AUTH: u8 = 2;
const RECORD_FAILED: u8 = 3;

/// The state of one tick in progress, shared by its three stages.
pub(super) struct Pipeline<'a> {
    pub ctx: &'a Context,
    /// Presented with every claim; None without a lock.
    pub fence: Option<Fence<'a>>,
    pub guard: &'a LeaseGuard,
    pub shutdown: &'a CancellationToken,
    /// The database's date: the due steps and "days overdue" follow it.
    pub today: NaiveDate,
    pub run_id: i64,
    /// `job_runs.period`: `today` as text.
    pub period: &'a str,
    /// Each step's due-date range today, oldest due dates first.
    pub windows: Vec<Window>,
    pub owed: Owed<'a>,
    stopped: AtomicU8,
    counts: Mutex<Counts>,
    /// Rows claimed but not yet recorded may never exceed 2 × batch_size:
    /// the claimer takes permits before it claims, the recorder gives them
    /// back once results are written.
    pub unrecorded: Semaphore,
    /// Rows marked started and not yet finished may never exceed
    /// `send_concurrency`: what a SIGKILL can leave unknown.
    pub started: Arc<Semaphore>,
    /// Rows marked started whose send then did not begin (stopped after the
    /// mark): returned at the end like rows never started.
    pub unsent: Mutex<Vec<ReminderId>>,
}

/// Returns permits to the claim bound when dropped.
struct PermitsBack<'a>(&'a Semaphore, usize);

impl Drop for PermitsBack<'_> {
    fn drop(&mut self) {
        self.0.add_permits(self.1);
    }
}

impl<'a> Pipeline<'a> {
    pub fn new(
        ctx: &'a Context,
        fence: Option<Fence<'a>>,
        guard: &'a LeaseGuard,
        shutdown: &'a CancellationToken,
        today: NaiveDate,
        run_id: i64,
        period: &'a str,
    ) -> Self {
        let reminders = &ctx.settings.reminders;
        Self {
            ctx,
            fence,
            guard,
            shutdown,
            today,
            run_id,
            period,
            windows: reminders.stages.windows(today),
            owed: Owed {
                today,
                timezone: ctx.settings.schedule.timezone.name(),
                min_days_between: reminders.min_days_between,
            },
            stopped: AtomicU8::new(NO_STOP),
            counts: Mutex::default(),
            unrecorded: Semaphore::new(2 * reminders.batch_size as usize),
            started: Arc::new(Semaphore::new(reminders.send_concurrency as usize)),
            unsent: Mutex::default(),
        }
    }

    pub fn stop_reason(&self) -> Option<Stop> {
        if let Err(reason) = self.guard.check() {
            return Some(Stop::Lost(reason));
        }
        if self.shutdown.is_cancelled() {
            return Some(Stop::Shutdown);
        }
        match self.stopped.load(Ordering::SeqCst) {
            SMTP_DOWN => Some(Stop::SmtpDown),
            SMTP_AUTH => Some(Stop::SmtpAuth),
            RECORD_FAILED => Some(Stop::RecordFailed),
            _ => None,
        }
    }

    /// Stops the tick for `stop`; true if it is the first stage stop.
    pub fn stop(&self, stop: Stop) -> bool {
        let code = match stop {
            Stop::SmtpDown => SMTP_DOWN,
            Stop::SmtpAuth => SMTP_AUTH,
            Stop::RecordFailed => RECORD_FAILED,
            Stop::Lost(_) | Stop::Shutdown => return false,
        };
        self.stopped
            .compare_exchange(NO_STOP, code, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// What the stages did so far.
    pub fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, more: &Counts) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(more);
    }

    /// Rows started but never sent, for the end-of-run return.
    pub fn take_unsent(&self) -> Vec<ReminderId> {
        std::mem::take(&mut *self.unsent.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Runs the three stages until the claimer runs out of work (or stops)
    /// and everything it claimed has been attempted and recorded. Meanwhile
    /// keeps the run's lease ahead of the database clock.
    pub async fn claim_send_record(&self) -> Result<(), TickError> {
        let (batches, claimed) = mpsc::channel::<Vec<Claimed>>(1);
        // Never full: rows in flight are bounded by `unrecorded`.
        let bound = 2 * self.ctx.settings.reminders.batch_size as usize;
        let (results, to_record) = mpsc::channel::<Attempted>(bound);
        let claiming = async move {
            let claimed = self.claim_all(&batches).await;
            drop(batches);
            claimed
        };
        let sending = self.send_all(claimed, results);
        let recording = self.record_all(to_record);
        let work = async { tokio::join!(claiming, sending, recording) };
        let (claimed, (), recorded) = tokio::select! {
            done = work => done,
            never = self.keep_lease() => match never {},
        };
        claimed.and(recorded)
    }

    /// Extends `job_runs.lease_until` every renewal interval while the lease
    /// is trusted; never returns.
    async fn keep_lease(&self) -> std::convert::Infallible {
        let lock = &self.ctx.settings.lock;
        loop {
            tokio::time::sleep(lock.renew_every).await;
            if self.guard.check().is_ok()
                && let Err(e) = db::runs::extend_lease(&self.ctx.db, self.run_id, lock.ttl).await
            {
                tracing::debug!(error = %e, "could not extend the run's lease in the database");
            }
        }
    }

    /// The record stage: one statement per chunk of results (see
    /// [`RECORD_CHUNKS_PER_BATCH`] and [`RECORD_EVERY`]). A chunk that cannot
    /// be written is kept for later (`tick::deferred`) and stops new sends.
    async fn record_all(&self, mut to_record: mpsc::Receiver<Attempted>) -> Result<(), TickError> {
        let max_attempts = self.ctx.settings.reminders.max_attempts;
        let chunk =
            (self.ctx.settings.reminders.batch_size as usize / RECORD_CHUNKS_PER_BATCH).max(1);
        let mut failure = None;
        loop {
            let mut deliveries = Vec::with_capacity(chunk);
            if to_record.recv_many(&mut deliveries, chunk).await == 0 {
                break;
            }
            let deadline = tokio::time::Instant::now() + RECORD_EVERY;
            while deliveries.len() < chunk {
                let more = chunk - deliveries.len();
                // `recv_many` is cancel-safe: nothing is lost at the deadline.
                match tokio::time::timeout_at(deadline, to_record.recv_many(&mut deliveries, more))
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            // Written or kept for later: either way no longer in flight here.
            let _written = PermitsBack(&self.unrecorded, deliveries.len());
            // After one failed write the rest of the tick's results (at most
            // the sends already under way) go straight to the deferred queue:
            // each new attempt could wait out a whole statement deadline.
            let written = match failure {
                None => db::deliveries::record_deliveries(
                    &self.ctx.db,
                    self.run_id,
                    max_attempts,
                    &deliveries,
                )
                .await
                .map_err(Some),
                Some(_) => Err(None),
            };
            match written {
                Ok(recorded) => self.add(&recorded),
                Err(e) => {
                    if let Some(e) = e {
                        if self.stop(Stop::RecordFailed) {
                            tracing::error!(error = %e, "delivery results cannot be written; no more mail is started this tick");
                        }
                        failure.get_or_insert(e);
                    }
                    // The mail went out (or not) regardless; count it from
                    // what we know and write the rows when the database allows.
                    let mut known = Counts::default();
                    deliveries.iter().for_each(|a| known.count(&a.delivery));
                    self.add(&known);
                    self.ctx
                        .deferred
                        .deliveries(self.run_id, max_attempts, deliveries);
                }
            }
        }
        match failure {
            Some(e) => Err(db_err("recording delivery results")(e)),
            None => Ok(()),
        }
    }
}
