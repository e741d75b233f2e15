//! The claim stage: retire what will never be sent, return what crashed
//! runs never started, then claim retries and new reminders, step by step,
//! page by page, each claimed batch handed to the marker.
//!
//! Every source row is checked before it is claimed (`crate::problems`)
//! and again once claimed (the row may have changed in between): a row
//! with a problem is counted and skipped, never sent; a claimed row that
//! is skipped is never marked, so the end of the run returns it. The stage
//! never trusts "one row per key": keys are deduplicated before a claim,
//! the claim itself refuses keys on several rows, and a reminder id that
//! comes back twice is sent by neither copy.
//!
//! Each claimed batch is checked against the suppression list in one
//! statement: a row whose recipients are all suppressed goes straight to
//! the record stage (`skipped`, reason `suppressed`), never marked or sent;
//! from a row with some of them suppressed, those are left out of `To`.

use std::sync::Arc;

use std::collections::HashSet;

use tokio::sync::mpsc;

use super::TickError;
use super::bounds::MarkWindow;
use super::bounds::Reservation;
use super::db_err;
use super::mark::Batch;
use super::pipeline::Pipeline;
use super::timings::Spent;
use crate::config::GroupBy;
use crate::db;
use crate::db::invoices::{OverdueKey, Owed, SourceRow};
use crate::db::reminders::{Backoff, ClaimError, ClaimedRow};
use crate::domain::{
    Attempted, Claimed, Counts, Delivery, InvoiceId, Problem, ReminderId, SkipReason, count_of,
};
use crate::lock::LostReason;
use crate::mail::message::parse_recipients;
use crate::problems;
use crate::stages::Window;

mod customers;

/// How many rows with a NULL key or due date a tick reports at most.
const UNUSABLE_REPORTED: u32 = 1_000;

/// The claim stage of one tick.
pub(super) struct Claimer {
    p: Arc<Pipeline>,
    /// Each step's due-date range today, oldest due dates first.
    windows: Vec<Window>,
    /// The record stage: claimed rows that are not sent at all (every
    /// recipient suppressed) go straight there.
    skipped: mpsc::Sender<Vec<Attempted>>,
    /// The mark window: customer mode's claims mark their rows started, so
    /// they take their letters' room in it before they claim.
    window: MarkWindow,
}

impl Claimer {
    pub fn new(
        p: Arc<Pipeline>,
        skipped: mpsc::Sender<Vec<Attempted>>,
        window: MarkWindow,
    ) -> Self {
        let windows = p.ctx().settings.reminders.stages.windows(p.today());
        Self {
            p,
            windows,
            skipped,
            window,
        }
    }

    fn by_customer(&self) -> bool {
        self.p.ctx().settings.reminders.group_by == GroupBy::Customer
    }

    /// What, besides its due step, decides whether an invoice owes one.
    fn owed(&self) -> Owed<'_> {
        let settings = &self.p.ctx().settings;
        Owed {
            today: self.p.today(),
            timezone: settings.schedule.timezone.name(),
            min_days_between: settings.reminders.min_days_between,
        }
    }

    pub async fn run(self, batches: &mpsc::Sender<Batch>) -> Result<(), TickError> {
        self.tidy_up().await?;
        self.report_unusable_rows().await?;
        if !self.claim_retries(batches).await? {
            return Ok(());
        }
        if self.by_customer() {
            self.claim_customers(batches).await?;
            return Ok(());
        }
        for window in &self.windows {
            if !self.claim_window(window, batches).await? {
                break;
            }
        }
        Ok(())
    }

    /// Retires failed rows that will never be sent, returns the unstarted
    /// rows of runs that are over, deletes archived messages past
    /// `archive.keep_days`, and (when configured) returns unknown rows for
    /// resending.
    async fn tidy_up(&self) -> Result<(), TickError> {
        let s = &self.p.ctx().settings.reminders;
        let database = &self.p.ctx().db;
        let retired = db::deliveries::retire_failed(database, &self.windows, s.max_attempts)
            .await
            .map_err(db_err(
                "discarding failed reminders that will not be retried",
            ))?;
        if retired > 0 {
            tracing::info!(
                retired,
                "failed reminders of steps no longer due, or out of attempts, were discarded"
            );
            self.p.add(&Counts {
                discarded: u32::try_from(retired).unwrap_or(u32::MAX),
                ..Counts::default()
            });
        }
        let returned = db::deliveries::return_abandoned(database)
            .await
            .map_err(db_err("returning rows that ended runs never started"))?;
        if returned > 0 {
            tracing::info!(
                returned,
                "rows claimed by runs that are over, never started, were returned"
            );
        }
        let keep_days = self.p.ctx().settings.archive.keep_days;
        let expired = db::archive::delete_expired(database, keep_days)
            .await
            .map_err(db_err("deleting archived messages past archive.keep_days"))?;
        if expired > 0 {
            tracing::info!(
                expired,
                keep_days,
                "archived messages past archive.keep_days were deleted"
            );
        }
        if let Some(after) = s.resend_unknown_after {
            let n = db::deliveries::resend_unknown(database, after)
                .await
                .map_err(db_err("returning unknown deliveries for resending"))?;
            if n > 0 {
                tracing::warn!(
                    n,
                    "unknown deliveries returned for resending (reminders.resend_unknown_after)"
                );
            }
        }
        Ok(())
    }

    /// Rows without a due date or a key (or, in customer mode, a customer)
    /// have no place in a page's order, so no page meets them: they are
    /// looked up once per tick (bounded) and reported.
    async fn report_unusable_rows(&self) -> Result<(), TickError> {
        let Some(due_by) = self.windows.iter().map(|w| w.due_to).max() else {
            return Ok(());
        };
        let rows = db::owed::unusable_rows(&self.p.ctx().db, due_by, UNUSABLE_REPORTED)
            .await
            .map_err(db_err("looking for invoices without a key or a due date"))?;
        for row in rows {
            let problem = self.without_customer(&row);
            if let Some(problem) = problem.or_else(|| row.into_parts().err()) {
                self.p.problem(problem);
            }
        }
        Ok(())
    }

    /// Re-claims failed rows whose backoff is over, a batch at a time.
    /// Ok(false): stop claiming altogether.
    async fn claim_retries(&self, batches: &mpsc::Sender<Batch>) -> Result<bool, TickError> {
        let s = &self.p.ctx().settings.reminders;
        let backoff = Backoff {
            first: s.retry_backoff,
            max: s.retry_backoff_max,
        };
        while self.p.stop_reason().is_none() {
            let Some(limit) = self.room(s.batch_size, 0) else {
                return Ok(false);
            };
            let Some(reserved) = self
                .reserve(usize::try_from(limit).unwrap_or(usize::MAX))
                .await
            else {
                return Ok(false);
            };
            let reclaimed = db::reminders::reclaim_failed(
                &self.p.ctx().stages.claims,
                &self.windows,
                self.owed(),
                self.p.run_id(),
                s.max_attempts,
                backoff,
                limit,
                self.p.fence(),
            )
            .await;
            let Some(rows) = self.fenced(reclaimed, "re-claiming failed reminders")? else {
                return Ok(false);
            };
            reserved.keep(rows.len());
            if rows.is_empty() {
                return Ok(true);
            }
            if !self.hand_on(batches, rows).await? {
                return Ok(false);
            }
        }
        Ok(false)
    }

    /// Claims the invoices of one step's window, page by page. Ok(false):
    /// stop claiming altogether (stopped, fenced, limit reached).
    async fn claim_window(
        &self,
        window: &Window,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let batch_size = self.p.ctx().settings.reminders.batch_size;
        let mut after: Option<OverdueKey> = None;
        loop {
            if self.p.stop_reason().is_some() {
                return Ok(false);
            }
            let Some(limit) = self.room(batch_size, 0) else {
                return Ok(false);
            };
            let page = self
                .p
                .timings()
                .time(
                    Spent::ClaimPages,
                    db::invoices::fetch_owed_page(
                        &self.p.ctx().stages.claims,
                        window,
                        self.owed(),
                        after,
                        limit,
                    ),
                )
                .await
                .map_err(db_err("reading the invoices that owe a reminder"))?;
            let Some(last) = page.last else {
                return Ok(true);
            };
            after = Some(last);
            let full_page = page.examined >= usize::try_from(limit).unwrap_or(usize::MAX);
            let ids = self.candidates(page.owed);
            let carried = ids.is_empty()
                || self
                    .claim_keys(std::slice::from_ref(window), &ids, batches)
                    .await?;
            if !carried {
                return Ok(false);
            }
            if !full_page {
                return Ok(true);
            }
        }
    }

    /// The keys of a page worth claiming, each once: a row with a problem
    /// is reported and left out; a key on several rows of the page goes to
    /// the claim unchecked, which refuses and reports it.
    fn candidates(&self, rows: Vec<SourceRow>) -> Vec<InvoiceId> {
        let repeated_ids = repeated(rows.iter().filter_map(|r| r.invoice_id.clone()));
        let mut ids = Vec::with_capacity(rows.len());
        let mut taken = HashSet::new();
        for row in rows {
            let repeated = row
                .invoice_id
                .as_ref()
                .is_some_and(|id| repeated_ids.contains(id));
            if !repeated && let Err(problem) = problems::check(row.clone()) {
                self.p.problem(problem);
                continue;
            }
            if let Some(id) = row.invoice_id
                && taken.insert(id.clone())
            {
                ids.push(id);
            }
        }
        ids
    }

    /// Claims `ids` (distinct keys), each for the step of `windows` its due
    /// date is in, and hands on what it took. Ok(false): stop claiming
    /// altogether.
    async fn claim_keys(
        &self,
        windows: &[Window],
        ids: &[InvoiceId],
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let Some(reserved) = self.reserve(ids.len()).await else {
            return Ok(false);
        };
        match self.claim_reserved(windows, ids, false).await? {
            Some(rows) => {
                reserved.keep(rows.len());
                self.hand_on(batches, rows).await
            }
            None => Ok(false),
        }
    }

    /// Waits for room for `n` more claimed rows within the claim bound;
    /// None if the tick stops meanwhile.
    async fn reserve(&self, n: usize) -> Option<Reservation<'_>> {
        let reserving = self.p.bound().reserve(n);
        let reserved = self
            .p
            .timings()
            .time(Spent::ClaimWaitingForRoom, reserving)
            .await?;
        self.p.stop_reason().is_none().then_some(reserved)
    }

    /// Claims `ids` (distinct keys), each for the step of `windows` its due
    /// date is in, in room already reserved (the caller keeps what was
    /// claimed), and reports what the claim refused; `started`: with the
    /// rows marked started by the claim itself. Ok(None): stop claiming
    /// altogether.
    async fn claim_reserved(
        &self,
        windows: &[Window],
        ids: &[InvoiceId],
        started: bool,
    ) -> Result<Option<Vec<ClaimedRow>>, TickError> {
        let (database, owed, run_id, fence) = (
            &self.p.ctx().stages.claims,
            self.owed(),
            self.p.run_id(),
            self.p.fence(),
        );
        let claiming = async {
            if started {
                db::reminders::claim_steps_started(database, ids, windows, owed, run_id, fence)
                    .await
            } else {
                db::reminders::claim_steps(database, ids, windows, owed, run_id, fence).await
            }
        };
        let claim = self
            .p
            .timings()
            .time(Spent::ClaimStatements, claiming)
            .await;
        let Some(claim) = self.fenced(claim, "claiming reminders")? else {
            return Ok(None);
        };
        let repeated = problems::repeated_keys(&claim.repeated);
        let refused = repeated.len();
        for problem in repeated {
            self.p.problem(problem);
        }
        let rows = claim.claimed;
        let skipped = ids.len().saturating_sub(rows.len()).saturating_sub(refused);
        self.p.add(&Counts {
            skipped: count_of(skipped),
            ..Counts::default()
        });
        Ok(Some(rows))
    }

    /// Checks claimed rows and passes the good ones on, as letters, to be
    /// marked; Ok(false) if the marker is gone. A row that is not passed
    /// on (see [`Self::screen`]) is never marked: the end of the run
    /// returns it.
    async fn hand_on(
        &self,
        batches: &mpsc::Sender<Batch>,
        rows: Vec<ClaimedRow>,
    ) -> Result<bool, TickError> {
        let (batch, _dropped) = self.screen(rows).await?;
        Ok(batch.is_empty()
            || batches
                .send(Batch::Claimed(self.letters(batch)))
                .await
                .is_ok())
    }

    /// The claimed rows worth sending, and the ids of those dropped. A row
    /// that fails its check now, or whose reminder id came back more than
    /// once, is dropped: it frees its room. Rows whose recipients are all
    /// suppressed go to the record stage instead (see [`Self::suppress`]).
    async fn screen(
        &self,
        rows: Vec<ClaimedRow>,
    ) -> Result<(Vec<Claimed>, Vec<ReminderId>), TickError> {
        self.p.add(&Counts {
            claimed: count_of(rows.len()),
            ..Counts::default()
        });
        let twice = repeated(rows.iter().map(|r| r.id));
        let mut reported = HashSet::new();
        let mut batch = Vec::with_capacity(rows.len());
        let mut dropped = Vec::new();
        for row in rows {
            let checked = if twice.contains(&row.id) {
                // Two source rows came back for one claim: believe neither.
                Err(row.source.problem(
                    Problem::RepeatedKey,
                    "the claim met several rows of the source with this invoice_id",
                ))
                .map_err(|p| (p, reported.insert(row.id)))
            } else {
                problems::check(row.source).map_err(|p| (p, true))
            };
            match checked {
                Ok((invoice, customer)) => batch.push(Claimed {
                    id: row.id,
                    attempts: row.attempts,
                    period: row.period,
                    invoice,
                    customer,
                    thread: row.thread,
                }),
                Err((problem, first)) => {
                    if first {
                        self.p.problem(problem);
                    }
                    dropped.push(row.id);
                }
            }
        }
        self.p.bound().release(dropped.len());
        match self.suppress(batch).await {
            Ok(batch) => Ok((batch, dropped)),
            Err((e, unsent)) => {
                // Never sent: the end of the run returns them.
                self.p.bound().release(unsent);
                Err(db_err("reading the suppression list")(e))
            }
        }
    }

    /// Looks the batch's recipients up in the suppression list (one
    /// statement) and returns the rows to send, each addressed to its
    /// recipients that are not suppressed. Rows with none left are
    /// recorded `skipped` (sent to the record stage, which frees their
    /// room). On error, the number of rows dropped with it.
    async fn suppress(&self, batch: Vec<Claimed>) -> Result<Vec<Claimed>, (sqlx::Error, usize)> {
        let recipients: Vec<Vec<String>> = batch
            .iter()
            .map(|row| {
                // The row passed its checks, so its cell parses.
                parse_recipients(&row.customer.email)
                    .map(|list| list.iter().map(ToString::to_string).collect())
                    .unwrap_or_default()
            })
            .collect();
        let mut asked: Vec<String> = recipients.iter().flatten().cloned().collect();
        asked.sort_unstable();
        asked.dedup();
        let suppressed: HashSet<String> =
            db::suppressions::suppressed_among(&self.p.ctx().db, &asked)
                .await
                .map_err(|e| (e, batch.len()))?
                .into_iter()
                .collect();
        if suppressed.is_empty() {
            return Ok(batch);
        }
        let mut to_send = Vec::with_capacity(batch.len());
        for (mut row, addresses) in batch.into_iter().zip(recipients) {
            let kept: Vec<String> = addresses
                .iter()
                .filter(|a| !suppressed.contains(*a))
                .cloned()
                .collect();
            if kept.len() == addresses.len() {
                to_send.push(row);
            } else if kept.is_empty() {
                tracing::info!(invoice_id = %row.invoice.id, period = %row.period, "every recipient is suppressed; reminder skipped");
                let skipped = Attempted {
                    id: row.id,
                    invoice: row.invoice.id,
                    period: row.period,
                    attempts_before: row.attempts,
                    delivery: Delivery::Skipped {
                        reason: SkipReason::Suppressed,
                    },
                };
                if self.skipped.send(vec![skipped]).await.is_err() {
                    // The record stage is gone: the end of the run returns it.
                    self.p.bound().release(1);
                }
            } else {
                tracing::debug!(
                    invoice_id = %row.invoice.id,
                    left_out = addresses.len().saturating_sub(kept.len()),
                    "suppressed recipients left out of To"
                );
                row.customer.email = kept.join(", ");
                to_send.push(row);
            }
        }
        Ok(to_send)
    }

    /// How many rows the next claim may take, besides `pending` rows being
    /// claimed meanwhile: `batch_size`, or less near
    /// `reminders.max_per_tick`; None once the tick's share is claimed.
    fn room(&self, batch_size: u32, pending: usize) -> Option<u32> {
        let Some(max) = self.p.ctx().settings.reminders.max_per_tick else {
            return Some(batch_size);
        };
        let left = max
            .saturating_sub(self.p.counts().claimed)
            .saturating_sub(u32::try_from(pending).unwrap_or(u32::MAX));
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
    fn fenced<T>(
        &self,
        claimed: Result<T, ClaimError>,
        doing: &'static str,
    ) -> Result<Option<T>, TickError> {
        match claimed {
            Ok(rows) => Ok(Some(rows)),
            Err(ClaimError::Fenced { token }) => {
                tracing::warn!(
                    fence = token,
                    "claim refused: a newer lock holder has written; stopping"
                );
                self.p.lose(LostReason::Fenced);
                Ok(None)
            }
            Err(ClaimError::Database(e)) => Err(db_err(doing)(e)),
        }
    }
}

/// The keys that occur more than once among `keys`.
fn repeated<K: std::hash::Hash + Eq>(keys: impl IntoIterator<Item = K>) -> HashSet<K> {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for key in keys {
        if let Some(again) = seen.replace(key) {
            twice.insert(again);
        }
    }
    twice
}

#[cfg(test)]
mod tests {
    use super::repeated;

    #[test]
    fn repeated_keys_are_those_seen_more_than_once() {
        let twice = repeated(["a", "b", "a", "c", "a", "b"]);
        let mut keys: Vec<_> = twice.into_iter().collect();
        keys.sort_unstable();
        assert_eq!(keys, ["a", "b"]);
        assert!(repeated(["x", "y"]).is_empty());
    }
}
