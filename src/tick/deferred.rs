//! Results held while the database is away.
//!
//! When the database goes away mid-tick, the outcome of mail already sent
//! and the hand-back of rows never started cannot be written. They are kept
//! here, in memory, and written (oldest first) at the start of the next
//! tick. If the process dies first, those rows stay `sending`: their
//! delivery is unknown to the database, and audit says so. Nothing is ever
//! resent because of a lost write.

use std::sync::{Mutex, MutexGuard};

use sqlx::PgPool;

use crate::db;
use crate::db::runs::RunOutcome;
use crate::domain::{Counts, Delivery, ReminderId};

/// The queue of writes waiting for the database. One per process.
#[derive(Default)]
pub struct Deferred {
    queue: Mutex<Queue>,
}

#[derive(Default, Debug)]
struct Queue {
    deliveries: Vec<Deliveries>,
    /// (run_id, ids that stay `sending`): the end-of-run sweep.
    hand_backs: Vec<(i64, Vec<ReminderId>)>,
    finishes: Vec<Finish>,
}

#[derive(Debug)]
struct Deliveries {
    run_id: i64,
    max_attempts: u32,
    rows: Vec<(ReminderId, Delivery)>,
}

#[derive(Debug)]
struct Finish {
    run_id: i64,
    outcome: RunOutcome,
    counts: Counts,
    error: Option<String>,
}

impl Deferred {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes waiting (for the `deferred_writes` gauge).
    pub fn len(&self) -> usize {
        let q = self.queue();
        q.deliveries.len() + q.hand_backs.len() + q.finishes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn deliveries(
        &self,
        run_id: i64,
        max_attempts: u32,
        rows: Vec<(ReminderId, Delivery)>,
    ) {
        if !rows.is_empty() {
            self.queue().deliveries.push(Deliveries {
                run_id,
                max_attempts,
                rows,
            });
        }
    }

    pub(crate) fn hand_back(&self, run_id: i64, keep: Vec<ReminderId>) {
        self.queue().hand_backs.push((run_id, keep));
    }

    pub(crate) fn finish(
        &self,
        run_id: i64,
        outcome: RunOutcome,
        counts: Counts,
        error: Option<String>,
    ) {
        self.queue().finishes.push(Finish {
            run_id,
            outcome,
            counts,
            error,
        });
    }

    /// Writes what earlier ticks could not, oldest first. Stops at the
    /// first failure (the database is still away) and keeps the rest.
    pub async fn flush(&self, db: &PgPool) {
        let mut pending = std::mem::take(&mut *self.queue());
        if let Err(e) = write(db, &mut pending).await {
            tracing::debug!(error = %e, "deferred writes still waiting for the database");
        }
        // Put back what is left, ahead of anything deferred meanwhile.
        let mut q = self.queue();
        pending.deliveries.append(&mut q.deliveries);
        pending.hand_backs.append(&mut q.hand_backs);
        pending.finishes.append(&mut q.finishes);
        *q = pending;
    }
}

async fn write(db: &PgPool, pending: &mut Queue) -> Result<(), sqlx::Error> {
    // Outcomes first: once written, those rows are no longer `sending`.
    while let Some(d) = pending.deliveries.first() {
        let r = db::reminders::record_deliveries(db, d.run_id, d.max_attempts, &d.rows).await?;
        tracing::info!(
            run_id = d.run_id,
            sent = r.sent,
            "wrote deferred delivery results"
        );
        pending.deliveries.remove(0);
    }
    while let Some((run_id, keep)) = pending.hand_backs.first() {
        let n = db::reminders::hand_back_unattempted(db, *run_id, keep).await?;
        tracing::info!(
            run_id,
            handed_back = n,
            "handed back rows of an earlier run"
        );
        pending.hand_backs.remove(0);
    }
    while let Some(f) = pending.finishes.first() {
        db::runs::finish_run(db, f.run_id, f.outcome, &f.counts, f.error.as_deref()).await?;
        pending.finishes.remove(0);
    }
    Ok(())
}
