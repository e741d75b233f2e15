//! Everything a tick needs, built once from [`Settings`]: the database pool,
//! the lock backend, the mailer, and the writes that are waiting for the
//! database to come back.
//!
//! # Deferred writes
//! When the database goes away mid-tick, the outcome of mail already sent
//! and the hand-back of rows never started cannot be written. They are kept
//! here, in memory, and written at the start of the next tick. If the
//! process dies first, those rows stay `sending`: their delivery is unknown
//! to the database, and audit says so. Nothing is ever resent because of a
//! lost write.

use std::sync::Mutex;

use sqlx::PgPool;

use crate::config::Settings;
use crate::db;
use crate::db::reminders::Delivery;
use crate::db::runs::{RunCounts, RunOutcome};
use crate::lock::{LockBackend, LockError};
use crate::mailer::Mailer;

pub struct Context {
    pub settings: Settings,
    pub db: PgPool,
    pub lock: LockBackend,
    pub mailer: Mailer,
    /// Writes that failed because the database was unreachable.
    deferred: Mutex<Deferred>,
}

#[derive(Default, Debug)]
struct Deferred {
    deliveries: Vec<DeferredDeliveries>,
    /// (run_id, ids that stay `sending`): the end-of-run sweep.
    hand_backs: Vec<(i64, Vec<i64>)>,
    finishes: Vec<DeferredFinish>,
}

#[derive(Debug)]
struct DeferredDeliveries {
    run_id: i64,
    max_attempts: u32,
    rows: Vec<(i64, Delivery)>,
}

#[derive(Debug)]
struct DeferredFinish {
    run_id: i64,
    outcome: RunOutcome,
    counts: RunCounts,
    error: Option<String>,
}

impl Context {
    /// Builds the lock client and the mailer; connects to nothing. Must be
    /// called inside a tokio runtime.
    pub fn new(settings: Settings, db: PgPool) -> Result<Self, LockError> {
        let lock = LockBackend::from_settings(&settings)?;
        let mailer = Mailer::new(&settings.smtp);
        Ok(Self {
            settings,
            db,
            lock,
            mailer,
            deferred: Mutex::new(Deferred::default()),
        })
    }

    fn deferred(&self) -> std::sync::MutexGuard<'_, Deferred> {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn defer_deliveries(
        &self,
        run_id: i64,
        max_attempts: u32,
        rows: Vec<(i64, Delivery)>,
    ) {
        if !rows.is_empty() {
            self.deferred().deliveries.push(DeferredDeliveries {
                run_id,
                max_attempts,
                rows,
            });
        }
    }

    pub(crate) fn defer_hand_back(&self, run_id: i64, keep: Vec<i64>) {
        self.deferred().hand_backs.push((run_id, keep));
    }

    pub(crate) fn defer_finish(
        &self,
        run_id: i64,
        outcome: RunOutcome,
        counts: RunCounts,
        error: Option<String>,
    ) {
        self.deferred().finishes.push(DeferredFinish {
            run_id,
            outcome,
            counts,
            error,
        });
    }

    /// Writes what earlier ticks could not, oldest first. Stops at the
    /// first failure (the database is still away) and keeps the rest.
    pub async fn flush_deferred(&self) {
        let mut pending = std::mem::take(&mut *self.deferred());
        let result = self.write_deferred(&mut pending).await;
        if let Err(e) = result {
            tracing::debug!(error = %e, "deferred writes still waiting for the database");
        }
        // Put back what is left, ahead of anything deferred meanwhile.
        let mut d = self.deferred();
        pending.deliveries.append(&mut d.deliveries);
        pending.hand_backs.append(&mut d.hand_backs);
        pending.finishes.append(&mut d.finishes);
        *d = pending;
    }

    async fn write_deferred(&self, pending: &mut Deferred) -> Result<(), sqlx::Error> {
        // Outcomes first: once written, those rows are no longer `sending`.
        while let Some(d) = pending.deliveries.first() {
            let r = db::reminders::record_deliveries(&self.db, d.run_id, d.max_attempts, &d.rows)
                .await?;
            tracing::info!(
                run_id = d.run_id,
                sent = r.sent,
                "wrote deferred delivery results"
            );
            pending.deliveries.remove(0);
        }
        while let Some((run_id, keep)) = pending.hand_backs.first() {
            let n = db::reminders::hand_back_unattempted(&self.db, *run_id, keep).await?;
            tracing::info!(
                run_id,
                handed_back = n,
                "handed back rows of an earlier run"
            );
            pending.hand_backs.remove(0);
        }
        while let Some(f) = pending.finishes.first() {
            db::runs::finish_run(&self.db, f.run_id, f.outcome, f.counts, f.error.as_deref())
                .await?;
            pending.finishes.remove(0);
        }
        Ok(())
    }
}
