//! The three stages of a tick: **claim** (page overdue invoices, claim a
//! batch, hand it on; at most one batch ahead of the sender), **send** (the
//! claimed reminders, `send_concurrency` at a time over the SMTP pool) and
//! **record** (results written in one statement per `batch_size` results or
//! per [`RECORD_EVERY`], whichever comes first). They run concurrently, so a
//! backlog moves at the pace of the slower of the database and SMTP; per
//! message the order never changes: claim committed, then send, then status.
//!
//! Guarantees: before every mail the lease, the shutdown signal and the SMTP
//! server's reachability are checked ([`Pipeline::stop_reason`]); at most
//! `2 × batch_size` rows are claimed but not yet recorded at any moment, so
//! that is all a SIGKILL can leave in `sending`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::NaiveDate;
use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::{TickError, db_err};
use crate::context::Context;
use crate::db;
use crate::db::invoices::{OverdueKey, Owed};
use crate::db::reminders::{ClaimError, Fence};
use crate::domain::{Claimed, Counts, Delivery, InvoiceId, ReminderId};
use crate::lock::{LeaseGuard, LostReason};
use crate::mail;
use crate::stages::Window;

/// How long a delivery result may wait before it is written with others.
const RECORD_EVERY: Duration = Duration::from_millis(200);

/// Why a tick stopped starting new mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Lost(LostReason),
    Shutdown,
    SmtpDown,
}

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
    windows: Vec<Window>,
    owed: Owed<'a>,
    /// Set when a connection to the SMTP server could not be made: the rest
    /// of the tick is handed back rather than failed one by one.
    smtp_down: AtomicBool,
    counts: Mutex<Counts>,
    /// Rows claimed but not yet recorded may never exceed 2 × batch_size:
    /// the claimer takes permits before it claims, the recorder gives them
    /// back once results are written.
    unrecorded: Semaphore,
    /// Rows this run attempted that legitimately stay `sending`: unknown
    /// deliveries, and rows whose result could not be written yet. Every
    /// other row the run still holds in `sending` at the end never started
    /// and is handed back. Small: it does not grow with the backlog.
    still_sending: Mutex<Vec<ReminderId>>,
}

/// What happened to one claimed row in this tick.
enum Attempt {
    /// The send never started; the end-of-run sweep hands the row back.
    NotStarted,
    Finished(ReminderId, Delivery),
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
            smtp_down: AtomicBool::new(false),
            counts: Mutex::default(),
            unrecorded: Semaphore::new(2 * ctx.settings.reminders.batch_size as usize),
            still_sending: Mutex::default(),
        }
    }

    pub fn stop_reason(&self) -> Option<Stop> {
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

    /// What the stages did so far.
    pub fn counts(&self) -> Counts {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, more: &Counts) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(more);
    }

    /// The rows that stay `sending` on purpose (see the field's doc).
    pub fn take_still_sending(&self) -> Vec<ReminderId> {
        std::mem::take(&mut *self.still_sending())
    }

    fn still_sending(&self) -> std::sync::MutexGuard<'_, Vec<ReminderId>> {
        self.still_sending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the three stages until the claimer runs out of work (or stops)
    /// and everything it claimed has been attempted and recorded.
    pub async fn claim_send_record(&self) -> Result<(), TickError> {
        let settings = &self.ctx.settings.reminders;
        let (batches, claimed) = mpsc::channel::<Vec<Claimed>>(1);
        let (results, to_record) = mpsc::channel::<Vec<(ReminderId, Delivery)>>(1);

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
                            self.unrecorded.add_permits(1);
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
        };
        let recording = self.record_all(to_record);

        let (claimed, (), recorded) = tokio::join!(claiming, sending, recording);
        claimed.and(recorded)
    }

    /// The claim stage: failed rows of superseded steps are discarded, then
    /// retries of due steps (they have waited longest), then new reminders
    /// step by step, page by page, each claimed batch handed to the sender.
    async fn claim_all(&self, batches: &mpsc::Sender<Vec<Claimed>>) -> Result<(), TickError> {
        let s = &self.ctx.settings.reminders;
        let superseded = db::reminders::supersede_failed(&self.ctx.db, &self.windows)
            .await
            .map_err(db_err("discarding superseded failed reminders"))?;
        if superseded > 0 {
            tracing::info!(
                superseded,
                "failed reminders of steps no longer due were discarded"
            );
            self.add(&Counts {
                discarded: superseded as u32,
                ..Counts::default()
            });
        }
        while self.stop_reason().is_none() {
            let Some(limit) = self.room(s.batch_size) else {
                return Ok(());
            };
            self.reserve(limit).await;
            let reclaimed = db::reminders::reclaim_failed(
                &self.ctx.db,
                &self.windows,
                self.owed,
                self.run_id,
                s.max_attempts,
                limit,
                self.fence,
            )
            .await;
            let Some(batch) = self.fenced(reclaimed, "re-claiming failed reminders")? else {
                return Ok(());
            };
            self.unrecorded.add_permits(limit as usize - batch.len());
            if batch.is_empty() {
                break;
            }
            if !self.hand_on(batches, batch).await {
                return Ok(());
            }
        }

        for window in &self.windows {
            if !self.claim_window(window, batches).await? {
                break;
            }
        }
        Ok(())
    }

    /// Claims the invoices of one step's window, page by page. Ok(false):
    /// stop claiming altogether (stopped, fenced, limit reached).
    async fn claim_window(
        &self,
        window: &Window,
        batches: &mpsc::Sender<Vec<Claimed>>,
    ) -> Result<bool, TickError> {
        let batch_size = self.ctx.settings.reminders.batch_size;
        let mut after: Option<OverdueKey> = None;
        loop {
            if self.stop_reason().is_some() {
                return Ok(false);
            }
            let Some(limit) = self.room(batch_size) else {
                return Ok(false);
            };
            let page = db::invoices::fetch_owed_page(&self.ctx.db, window, self.owed, after, limit)
                .await
                .map_err(db_err("reading the invoices that owe a reminder"))?;
            let Some(last) = page.last().copied() else {
                return Ok(true);
            };
            after = Some(last);
            if self.stop_reason().is_some() {
                return Ok(false);
            }
            let ids: Vec<InvoiceId> = page.iter().map(|k| k.id).collect();
            self.reserve(limit).await;
            let claimed = db::reminders::claim_batch(
                &self.ctx.db,
                &ids,
                window,
                self.owed,
                self.run_id,
                self.fence,
            )
            .await;
            let Some(claimed) = self.fenced(claimed, "claiming reminders")? else {
                return Ok(false);
            };
            self.unrecorded.add_permits(limit as usize - claimed.len());
            self.add(&Counts {
                skipped: (ids.len() - claimed.len()) as u32,
                ..Counts::default()
            });
            if !self.hand_on(batches, claimed).await {
                return Ok(false);
            }
            if page.len() < limit as usize {
                return Ok(true);
            }
        }
    }

    /// Waits until `n` more rows may be claimed without exceeding the bound
    /// on claimed-but-unrecorded rows.
    async fn reserve(&self, n: u32) {
        if let Ok(permits) = self.unrecorded.acquire_many(n).await {
            permits.forget();
        }
    }

    /// Passes a claimed batch to the sender; false if the sender is gone.
    async fn hand_on(&self, batches: &mpsc::Sender<Vec<Claimed>>, batch: Vec<Claimed>) -> bool {
        self.add(&Counts {
            claimed: batch.len() as u32,
            ..Counts::default()
        });
        batch.is_empty() || batches.send(batch).await.is_ok()
    }

    /// How many rows the next claim may take: `batch_size`, or less near
    /// `reminders.max_per_tick`; None once the tick's share is claimed.
    fn room(&self, batch_size: u32) -> Option<u32> {
        let Some(max) = self.ctx.settings.reminders.max_per_tick else {
            return Some(batch_size);
        };
        let left = max.saturating_sub(self.counts().claimed);
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
        claimed: Result<Vec<Claimed>, ClaimError>,
        doing: &'static str,
    ) -> Result<Option<Vec<Claimed>>, TickError> {
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
    /// cannot be written is kept for the next tick (`tick::deferred`), and
    /// its rows stay out of the end-of-run hand-back.
    async fn record_all(
        &self,
        mut to_record: mpsc::Receiver<Vec<(ReminderId, Delivery)>>,
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
                Ok(recorded) => self.add(&recorded),
                Err(e) => {
                    // The mail went out (or not) regardless; count it from
                    // what we know and write the rows when the database is back.
                    let mut known = Counts::default();
                    deliveries.iter().for_each(|(_, d)| known.count(d));
                    self.add(&known);
                    self.still_sending()
                        .extend(deliveries.iter().map(|(id, _)| *id));
                    self.ctx
                        .deferred
                        .deliveries(self.run_id, max_attempts, deliveries);
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
    async fn attempt(&self, reminder: Claimed) -> Attempt {
        let (id, invoice_id) = (reminder.id, reminder.invoice.id);
        self.ctx.mailer.pace().await;
        if let Some(stop) = self.stop_reason() {
            tracing::debug!(%invoice_id, ?stop, "not sending");
            return Attempt::NotStarted;
        }
        let settings = &self.ctx.settings;
        let stages = &settings.reminders.stages;
        let built = match stages.step(&reminder.period) {
            Some(step) => mail::compose(
                &self.ctx.templates,
                stages,
                &settings.smtp,
                &reminder.invoice,
                &reminder.customer,
                step,
                self.today,
            ),
            None => Err(mail::MessageError::Render {
                invoice_id,
                reason: format!(
                    "step {:?} is not one of reminders.stages (was the configuration changed?)",
                    reminder.period
                ),
            }),
        };
        let mail = match built {
            Ok(mail) => mail,
            Err(e) => {
                tracing::warn!(%invoice_id, error = %e, "reminder discarded");
                let error = e.to_string();
                return Attempt::Finished(id, Delivery::Discarded { error });
            }
        };
        let delivery = match self.ctx.mailer.send(&mail).await {
            Ok(()) => Delivery::Sent {
                message_id: mail.message_id,
            },
            Err(e) => {
                if e.is_unreachable() && !self.smtp_down.swap(true, Ordering::SeqCst) {
                    tracing::error!(%invoice_id, error = %e, "SMTP server unreachable; handing back the rest of this tick");
                }
                mail::classify(invoice_id, e)
            }
        };
        Attempt::Finished(id, delivery)
    }
}
