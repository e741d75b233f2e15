//! Results held while the database is away.
//!
//! When the database goes away mid-tick, the outcome of mail already sent,
//! the return of rows never started and the run's own record cannot be
//! written. They are kept here, in memory, and written oldest first as soon
//! as the database takes them (`run` checks every `lock.renew_every`), at
//! the start of the next tick and, with a bounded wait, before the process
//! exits. Meanwhile every attempt keeps the leases of those runs, so no
//! other replica takes their unknown rows for resending while their
//! results may still arrive (`db::runs`). Whatever is still unwritten at exit is logged at error level,
//! one line per reminder with its ids and Message-ID, so an operator can
//! settle those rows (`settle`); `run-once` then exits non-zero.
//!
//! A write that fails because the database cannot be reached is kept and
//! retried; a write that fails by itself (a trigger, a constraint, a
//! permission) is retried row by row, and a row that still fails is logged
//! with its ids and dropped, so one bad row never blocks the others. The
//! queue holds at most [`MAX_ROWS`] results; beyond that a new result is
//! logged and dropped (its row stays `sending`: audit reports it unknown).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::unsent::Returned;
use crate::db::runs::RunOutcome;
use crate::db::{self, Db};
use crate::domain::{Attempted, Counts};

/// The most results kept. Sending stops when results cannot be written
/// (`tick::pipeline`), so one tick adds at most its claim bound (`2 ×
/// batch_size`, and in customer mode the in-flight limit's statements' rows).
pub const MAX_ROWS: usize = 50_000;

/// The queue of writes waiting for the database. One per process; cheap
/// to clone (the clones share the queue).
#[derive(Default, Clone)]
pub struct Deferred {
    queue: Arc<Mutex<Queue>>,
}

#[derive(Default, Debug)]
struct Queue {
    deliveries: Vec<Deliveries>,
    /// (run_id, rows started but never sent): the end-of-run return.
    hand_backs: Vec<(i64, Returned)>,
    finishes: Vec<Finish>,
}

#[derive(Debug)]
struct Deliveries {
    run_id: i64,
    max_attempts: u32,
    rows: Vec<Attempted>,
}

#[derive(Debug)]
struct Finish {
    run_id: i64,
    outcome: RunOutcome,
    counts: Counts,
    error: Option<String>,
}

/// How a flush went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    pub written: usize,
    /// Rows whose write failed by itself; logged and dropped.
    pub dropped: usize,
    /// Writes still waiting for the database.
    pub waiting: usize,
}

impl Deferred {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes waiting (for the `deferred_writes` gauge).
    pub fn len(&self) -> usize {
        let q = self.queue();
        q.deliveries.iter().map(|d| d.rows.len()).sum::<usize>()
            + q.hand_backs.len()
            + q.finishes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether results of run `run_id` are held here.
    pub fn keeps_results_of(&self, run_id: i64) -> bool {
        let q = self.queue();
        q.deliveries.iter().any(|d| d.run_id == run_id)
            || q.hand_backs.iter().any(|(id, _)| *id == run_id)
    }

    /// The runs whose results are held here.
    fn runs(q: &Queue) -> Vec<i64> {
        let mut runs: Vec<i64> = q
            .deliveries
            .iter()
            .map(|d| d.run_id)
            .chain(q.hand_backs.iter().map(|(id, _)| *id))
            .chain(q.finishes.iter().map(|f| f.run_id))
            .collect();
        runs.sort_unstable();
        runs.dedup();
        runs
    }

    pub(crate) fn deliveries(&self, run_id: i64, max_attempts: u32, rows: Vec<Attempted>) {
        if rows.is_empty() {
            return;
        }
        let mut q = self.queue();
        let held: usize = q.deliveries.iter().map(|d| d.rows.len()).sum();
        let room = MAX_ROWS.saturating_sub(held);
        let mut rows = rows;
        if rows.len() > room {
            for row in rows.drain(room..) {
                log_unwritten(
                    run_id,
                    &row,
                    "the queue of results waiting for the database is full",
                );
            }
        }
        q.deliveries.push(Deliveries {
            run_id,
            max_attempts,
            rows,
        });
    }

    pub(crate) fn hand_back(&self, run_id: i64, unsent: Returned) {
        self.queue().hand_backs.push((run_id, unsent));
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

    /// Writes what earlier ticks could not, oldest first, until the
    /// database stops answering; keeps the rest. First keeps the leases of
    /// the runs whose results are held (a run holding results is not over:
    /// its unknown rows must not be resent meanwhile); closes those of the
    /// finished runs it wrote everything for.
    pub async fn flush(&self, db: &Db, lease: Duration) -> Flushed {
        let mut pending = std::mem::take(&mut *self.queue());
        let mut flushed = Flushed::default();
        let runs = Self::runs(&pending);
        if !runs.is_empty()
            && let Err(e) = db::runs::extend_leases(db, &runs, lease).await
        {
            tracing::debug!(error = %e, "could not keep the leases of runs with held results");
        }
        match write(db, &mut pending, &mut flushed).await {
            Ok(()) if !runs.is_empty() => {
                if let Err(e) = db::runs::close_leases(db, &runs).await {
                    tracing::debug!(error = %e, "could not close the leases of runs whose results are written");
                }
            }
            Ok(()) => {}
            Err(e) => {
                tracing::debug!(error = %e, "deferred writes still waiting for the database");
            }
        }
        // Put back what is left, ahead of anything deferred meanwhile.
        let mut q = self.queue();
        pending.deliveries.append(&mut q.deliveries);
        pending.hand_backs.append(&mut q.hand_backs);
        pending.finishes.append(&mut q.finishes);
        *q = pending;
        flushed.waiting = q.deliveries.iter().map(|d| d.rows.len()).sum::<usize>()
            + q.hand_backs.len()
            + q.finishes.len();
        flushed
    }

    /// Writes held results as soon as the database takes them, and keeps
    /// their runs' leases meanwhile: every `lock.renew_every`, until `stop`.
    /// `run` keeps one of these going beside the schedule.
    pub async fn keep_flushing(
        &self,
        db: &Db,
        lock: &crate::config::LockSettings,
        stop: &tokio_util::sync::CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(lock.renew_every) => {}
            }
            if !self.is_empty() {
                self.flush(db, lock.ttl).await;
            }
        }
    }

    /// Before the process exits: flushes, retrying for up to `wait`, then
    /// logs every result still unwritten (with the Message-ID its mail
    /// carried, stored on its row) and returns how many.
    pub async fn flush_before_exit(
        &self,
        db: &Db,
        wait: Duration,
        lock: &crate::config::LockSettings,
    ) -> usize {
        if self.is_empty() {
            return 0;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.flush(db, lock.ttl).await.waiting == 0 {
                return 0;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let q = std::mem::take(&mut *self.queue());
        let mut unwritten = 0;
        for d in &q.deliveries {
            for row in &d.rows {
                unwritten += 1;
                let message_id = &row.message_id;
                tracing::error!(
                    run_id = d.run_id,
                    reminder_id = %row.id,
                    invoice_id = %row.invoice,
                    period = %row.step,
                    outcome = row.delivery.kind(),
                    message_id = %message_id,
                    "result not written: the database did not come back before exit; the row stays 'sending' (settle it with `invoice-reminder settle`)"
                );
            }
        }
        for (run_id, _) in &q.hand_backs {
            tracing::error!(
                run_id,
                "rows this run never sent were not handed back before exit; a later tick hands them back"
            );
        }
        unwritten
    }
}

fn log_unwritten(run_id: i64, row: &Attempted, why: &str) {
    tracing::error!(
        run_id,
        reminder_id = %row.id,
        invoice_id = %row.invoice,
        period = %row.step,
        outcome = row.delivery.kind(),
        "result dropped: {why}; the row stays as it is (audit shows it)"
    );
}

async fn write(db: &Db, pending: &mut Queue, flushed: &mut Flushed) -> Result<(), sqlx::Error> {
    // Outcomes first: once written, those rows are no longer `sending`.
    while let Some(d) = pending.deliveries.first() {
        match db::deliveries::record_deliveries(db, d.run_id, d.max_attempts, &d.rows).await {
            Ok(r) => {
                tracing::info!(
                    run_id = d.run_id,
                    sent = r.sent,
                    "wrote deferred delivery results"
                );
                flushed.written += d.rows.len();
            }
            Err(e) if db::conn::is_unreachable(&e) => return Err(e),
            Err(e) => {
                tracing::warn!(run_id = d.run_id, error = %e, "a deferred write failed by itself; writing its rows one by one");
                for row in &d.rows {
                    let one = std::slice::from_ref(row);
                    match db::deliveries::record_deliveries(db, d.run_id, d.max_attempts, one).await
                    {
                        Ok(_) => flushed.written += 1,
                        Err(e) if db::conn::is_unreachable(&e) => return Err(e),
                        Err(e) => {
                            flushed.dropped += 1;
                            log_unwritten(d.run_id, row, &format!("its write fails: {e}"));
                        }
                    }
                }
            }
        }
        pending.deliveries.remove(0);
    }
    while let Some((run_id, unsent)) = pending.hand_backs.first() {
        match db::returned::hand_back(db, *run_id, &unsent.ids, &unsent.fresh).await {
            Ok(n) => tracing::info!(
                run_id,
                handed_back = n,
                "handed back rows of an earlier run"
            ),
            Err(e) if db::conn::is_unreachable(&e) => return Err(e),
            Err(e) => {
                tracing::error!(run_id, error = %e, "handing back an earlier run's unsent rows failed; a later tick's sweep hands them back")
            }
        }
        pending.hand_backs.remove(0);
    }
    while let Some(f) = pending.finishes.first() {
        let end = db::runs::RunEnd {
            outcome: f.outcome,
            counts: &f.counts,
            error: f.error.as_deref(),
            keeping_results: false,
        };
        match db::runs::finish_run(db, f.run_id, end).await {
            Ok(()) => {}
            Err(e) if db::conn::is_unreachable(&e) => return Err(e),
            Err(e) => {
                tracing::error!(run_id = f.run_id, error = %e, "recording an earlier run's end failed; dropped")
            }
        }
        pending.finishes.remove(0);
    }
    Ok(())
}
