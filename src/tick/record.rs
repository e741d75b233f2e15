//! Recording results: what each send ended in waits in [`Finished`] and is
//! written by the mark phase (`mark.rs`), in the same statement as its
//! next mark, so while mail flows a result costs no commit of its own. A
//! result that has waited [`RECORD_EVERY`], or half a `batch_size` of
//! them, or the last ones once nothing is left to mark, are written in a
//! statement of their own; a message's rows are always in the same
//! statement. A written result frees its row's room in the claim bound. A
//! write that fails keeps its results for later (`tick::deferred`) and
//! stops new sends; every later result goes straight there.

use std::time::Duration;

use tokio::time::Instant;

use super::pipeline::{Pipeline, Stop};
use super::{TickError, db_err};
use crate::domain::{Attempted, Counts};

/// How long a delivery result may wait for a mark to carry it before it is
/// written on its own. At full speed marks come far more often
/// (BENCHMARKS.md, "Results written with the marks"); this matters only
/// for slow sends (a relay that paces us, a long reply), where each write
/// is a statement of its own: a second keeps those to at most one a
/// second, and results of a slow tick still reach the table within one.
pub(super) const RECORD_EVERY: Duration = Duration::from_secs(1);

/// Results are written on their own once `batch_size /
/// RECORD_CHUNKS_PER_BATCH` rows wait: claim room comes back only once
/// results are written, and the claimer needs a whole page of it
/// (BENCHMARKS.md, "Results written with the marks").
const RECORD_CHUNKS_PER_BATCH: usize = 2;

/// Results waiting to be written.
pub(super) struct Finished {
    results: Vec<Attempted>,
    /// When the oldest waiting result arrived.
    since: Option<Instant>,
    /// Rows that make a write of their own worth it.
    chunk: usize,
    /// The first write that failed; later results go straight to the
    /// deferred queue.
    failure: Option<sqlx::Error>,
}

impl Finished {
    pub fn new(batch_size: u32) -> Self {
        let batch_size = usize::try_from(batch_size).unwrap_or(1);
        Self {
            results: Vec::new(),
            since: None,
            chunk: (batch_size / RECORD_CHUNKS_PER_BATCH).max(1),
            failure: None,
        }
    }

    /// A message's results (all its rows).
    pub fn add(&mut self, results: Vec<Attempted>) {
        if results.is_empty() {
            return;
        }
        self.since.get_or_insert_with(Instant::now);
        self.results.extend(results);
    }

    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    /// Whether the results waiting should be written now without a mark:
    /// a chunk of them, or the oldest waited [`RECORD_EVERY`].
    pub fn due(&self) -> bool {
        self.results.len() >= self.chunk || self.deadline().is_some_and(|d| d <= Instant::now())
    }

    /// When the oldest result waiting has waited [`RECORD_EVERY`].
    pub fn deadline(&self) -> Option<Instant> {
        self.since.map(|s| s + RECORD_EVERY)
    }

    /// The results to write with the next statement (none after a failed
    /// write: those go to the deferred queue).
    pub fn take(&mut self, p: &Pipeline) -> Vec<Attempted> {
        self.since = None;
        let results = std::mem::take(&mut self.results);
        if self.failure.is_some() {
            let n = results.len();
            self.defer(p, results);
            p.bound().release(n);
            return Vec::new();
        }
        results
    }

    /// `results` were written (`Ok`, with their counts) or not; either
    /// way their rows are no longer in flight here.
    pub fn written(
        &mut self,
        p: &Pipeline,
        results: Vec<Attempted>,
        outcome: Result<Counts, sqlx::Error>,
    ) {
        let n = results.len();
        match outcome {
            Ok(recorded) => p.add(&recorded),
            Err(e) => {
                if p.stop(Stop::RecordFailed) {
                    tracing::error!(error = %e, "delivery results cannot be written; no more mail is started this tick");
                }
                self.failure.get_or_insert(e);
                self.defer(p, results);
            }
        }
        p.bound().release(n);
    }

    /// Ok, or the first write that failed.
    pub fn outcome(self) -> Result<(), TickError> {
        match self.failure {
            Some(e) => Err(db_err("recording delivery results")(e)),
            None => Ok(()),
        }
    }

    /// Keeps results the database would not take. The mail went out (or
    /// not) regardless: they are counted from what we know, and written
    /// when the database allows.
    fn defer(&self, p: &Pipeline, results: Vec<Attempted>) {
        if results.is_empty() {
            return;
        }
        let mut known = Counts::default();
        results.iter().for_each(|a| known.count(&a.delivery));
        p.add(&known);
        let ctx = p.ctx();
        ctx.deferred
            .deliveries(p.run_id(), ctx.settings.reminders.max_attempts, results);
    }
}
