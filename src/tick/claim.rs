//! The claim stage: retire what will never be sent, return what crashed
//! runs never started, then claim retries and new reminders, step by step,
//! page by page, each claimed batch handed to the sender.

use tokio::sync::mpsc;

use super::TickError;
use super::db_err;
use super::pipeline::Pipeline;
use crate::db;
use crate::db::invoices::OverdueKey;
use crate::db::reminders::{Backoff, ClaimError};
use crate::domain::{Claimed, Counts, InvoiceId};
use crate::lock::LostReason;
use crate::stages::Window;

impl Pipeline<'_> {
    pub(super) async fn claim_all(
        &self,
        batches: &mpsc::Sender<Vec<Claimed>>,
    ) -> Result<(), TickError> {
        let s = &self.ctx.settings.reminders;
        let database = &self.ctx.db;
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
            self.add(&Counts {
                discarded: retired as u32,
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
        let backoff = Backoff {
            first: s.retry_backoff,
            max: s.retry_backoff_max,
        };
        while self.stop_reason().is_none() {
            let Some(limit) = self.room(s.batch_size) else {
                return Ok(());
            };
            if !self.reserve(limit).await {
                return Ok(());
            }
            let reclaimed = db::reminders::reclaim_failed(
                database,
                &self.windows,
                self.owed,
                self.run_id,
                s.max_attempts,
                backoff,
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
            let Some(last) = page.last else {
                return Ok(true);
            };
            after = Some(last);
            let full_page = page.examined >= limit as usize;
            if page.owed.is_empty() {
                if !full_page {
                    return Ok(true);
                }
                continue;
            }
            let ids: Vec<InvoiceId> = page.owed.into_iter().map(|k| k.id).collect();
            if !self.reserve(ids.len() as u32).await {
                return Ok(false);
            }
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
            self.unrecorded.add_permits(ids.len() - claimed.len());
            self.add(&Counts {
                skipped: (ids.len() - claimed.len()) as u32,
                ..Counts::default()
            });
            if !self.hand_on(batches, claimed).await {
                return Ok(false);
            }
            if !full_page {
                return Ok(true);
            }
        }
    }

    /// Waits until `n` more rows may be claimed without exceeding the bound
    /// on claimed-but-unrecorded rows; false if the tick stopped meanwhile
    /// (then nothing was reserved).
    async fn reserve(&self, n: u32) -> bool {
        match self.unrecorded.acquire_many(n).await {
            Ok(permits) if self.stop_reason().is_none() => {
                permits.forget();
                true
            }
            _ => false,
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
}
