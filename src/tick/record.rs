//! The record phase: delivery results written in one statement per chunk
//! of half a `batch_size` rows, or per [`RECORD_EVERY`], whichever comes
//! first; a message's rows are always in the same statement. A written
//! result frees its row's room in the claim bound. A chunk that cannot be
//! written is kept for later (`tick::deferred`) and stops new sends.

use std::sync::Arc;

use std::time::Duration;

use tokio::sync::mpsc;

use super::pipeline::{Pipeline, Stop};
use super::timings::Spent;
use super::{TickError, db_err};
use crate::db;
use crate::domain::{Attempted, Counts};

/// How long a delivery result may wait before it is written with others.
/// At full speed a chunk fills long before this (250 results in about
/// 30 ms); it matters only for slow sends, where each flush is a statement
/// of its own: at 200 ms a tick starved of CPU wrote 85 transactions per
/// 1,000 reminders against 72 on a quiet machine (the cost guard,
/// `tests/worker/costs.rs`), so a count that should follow the design
/// followed the machine. A second keeps that share at most one statement
/// a second, and results of a slow tick still reach the table within one.
pub(super) const RECORD_EVERY: Duration = Duration::from_secs(1);

/// Results are written in chunks of `batch_size / RECORD_CHUNKS_PER_BATCH`.
/// Claim room comes back only once results are written, and the claimer
/// needs a whole page of it: written per `batch_size`, the results waiting
/// took most of the `2 × batch_size` bound and the senders idled while the
/// next page was claimed. Half a batch keeps room coming back while the
/// next page is claimed, for few statements (BENCHMARKS.md, "Results
/// written per half batch").
const RECORD_CHUNKS_PER_BATCH: usize = 2;

/// The record phase of one tick.
pub(super) struct Recorder {
    p: Arc<Pipeline>,
    /// Rows per statement (a message's rows are never split).
    chunk: usize,
    /// The first write that failed; later results go straight to the
    /// deferred queue.
    failure: Option<sqlx::Error>,
}

impl Recorder {
    pub fn new(p: Arc<Pipeline>) -> Self {
        let batch_size = usize::try_from(p.ctx().settings.reminders.batch_size).unwrap_or(1);
        Self {
            p,
            chunk: (batch_size / RECORD_CHUNKS_PER_BATCH).max(1),
            failure: None,
        }
    }

    /// Writes results until the senders are done.
    /// Each message's results arrive together and are written in the same
    /// statement.
    pub async fn run(
        mut self,
        mut results: mpsc::Receiver<Vec<Attempted>>,
    ) -> Result<(), TickError> {
        while let Some(chunk) = next_chunk(&mut results, self.chunk).await {
            self.write(chunk).await;
        }
        match self.failure {
            Some(e) => Err(db_err("recording delivery results")(e)),
            None => Ok(()),
        }
    }

    /// Writes one chunk, or keeps it for later; either way its rows are no
    /// longer in flight here.
    async fn write(&mut self, deliveries: Vec<Attempted>) {
        let ctx = self.p.ctx();
        let max_attempts = ctx.settings.reminders.max_attempts;
        let n = deliveries.len();
        // After one failed write the rest of the tick's results (at most
        // the sends already under way) go straight to the deferred queue:
        // each new attempt could wait out a whole statement deadline.
        let written = match self.failure {
            None => Some(
                self.p
                    .timings()
                    .time(
                        Spent::RecordStatements,
                        db::deliveries::record_deliveries(
                            &ctx.phases.records,
                            self.p.run_id(),
                            max_attempts,
                            &deliveries,
                        ),
                    )
                    .await,
            ),
            Some(_) => None,
        };
        match written {
            Some(Ok(recorded)) => self.p.add(&recorded),
            Some(Err(e)) => {
                if self.p.stop(Stop::RecordFailed) {
                    tracing::error!(error = %e, "delivery results cannot be written; no more mail is started this tick");
                }
                self.failure = Some(e);
                self.defer(deliveries);
            }
            None => self.defer(deliveries),
        }
        self.p.bound().release(n);
    }

    /// Keeps results the database would not take. The mail went out (or
    /// not) regardless: they are counted from what we know, and written
    /// when the database allows.
    fn defer(&self, deliveries: Vec<Attempted>) {
        let mut known = Counts::default();
        deliveries.iter().for_each(|a| known.count(&a.delivery));
        self.p.add(&known);
        let ctx = self.p.ctx();
        ctx.deferred.deliveries(
            self.p.run_id(),
            ctx.settings.reminders.max_attempts,
            deliveries,
        );
    }
}

/// The next chunk of results: the next message's, then more until `rows`
/// rows or [`RECORD_EVERY`] after the first, whichever comes first; None
/// once the senders are done. A chunk counts rows, not messages: in
/// customer mode a message holds up to `max_invoices_per_mail` rows, and
/// counted by messages a chunk could need more rows than the claim bound
/// lets in, so it never filled and each one waited out the deadline
/// (BENCHMARKS.md, "Results written per half batch").
async fn next_chunk(
    results: &mut mpsc::Receiver<Vec<Attempted>>,
    rows: usize,
) -> Option<Vec<Attempted>> {
    // Up to `rows - n` messages at a time (each has a row at least): in
    // invoice mode that is exactly the rows missing, and a whole chunk
    // arrives in one call rather than one timer per message.
    let mut letters = Vec::new();
    if results.recv_many(&mut letters, rows.max(1)).await == 0 {
        return None;
    }
    let deadline = tokio::time::Instant::now() + RECORD_EVERY;
    let mut n = letters.iter().map(Vec::len).fold(0, usize::saturating_add);
    while n < rows {
        let before = letters.len();
        // `recv_many` is cancel-safe: nothing is lost at the deadline.
        match tokio::time::timeout_at(
            deadline,
            results.recv_many(&mut letters, rows.saturating_sub(n)),
        )
        .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                n = letters
                    .get(before..)
                    .unwrap_or_default()
                    .iter()
                    .map(Vec::len)
                    .fold(n, usize::saturating_add);
            }
        }
    }
    Some(letters.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Delivery, InvoiceId, ReminderId};

    /// A message's results: `rows` rows.
    fn letter(rows: usize) -> Vec<Attempted> {
        (0..rows)
            .map(|n| Attempted {
                id: ReminderId(i64::try_from(n).unwrap_or_default()),
                invoice: InvoiceId(n.to_string()),
                step: "overdue".into(),
                attempts_before: 0,
                message_id: format!("m{n}@test"),
                delivery: Delivery::Failed {
                    error: "test".into(),
                },
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_chunk_of_statements_goes_once_it_holds_enough_rows_without_waiting() {
        let (tx, mut rx) = mpsc::channel(100);
        for _ in 0..60 {
            tx.send(letter(5)).await.unwrap_or_else(|_| unreachable!());
        }
        let start = tokio::time::Instant::now();
        let chunk = next_chunk(&mut rx, 250).await.unwrap_or_default();
        assert_eq!(start.elapsed(), Duration::ZERO, "written without waiting");
        assert_eq!(chunk.len(), 300, "every message that had arrived");
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_chunk_goes_at_the_deadline_and_nothing_is_lost() {
        let (tx, mut rx) = mpsc::channel(100);
        tx.send(letter(3)).await.unwrap_or_else(|_| unreachable!());
        let start = tokio::time::Instant::now();
        let chunk = next_chunk(&mut rx, 250).await.unwrap_or_default();
        assert_eq!((chunk.len(), start.elapsed()), (3, RECORD_EVERY));
        tx.send(letter(2)).await.unwrap_or_else(|_| unreachable!());
        drop(tx);
        assert_eq!(next_chunk(&mut rx, 250).await.map(|c| c.len()), Some(2));
        assert!(next_chunk(&mut rx, 250).await.is_none());
    }
}
