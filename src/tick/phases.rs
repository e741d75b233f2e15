//! The phases of a tick, running concurrently, each a struct of its own
//! with its own file: **claim** (`claim/`: owed invoices, page by page,
//! checked row by row, grouped into letters), **mark** (`mark.rs`:
//! claimed rows recorded as started, a group at a time, ahead of the
//! senders, each mark also **recording** the results that finished since
//! the last, `record.rs`) and **send** (`send.rs`: marked rows built and
//! sent, `send_concurrency` at a time over the SMTP pool). A backlog moves
//! at the pace of the slower of the database and SMTP; per message the
//! order never changes: claim committed, start recorded, send, status
//! written.
//!
//! This file wires them together; what they share is [`Pipeline`]
//! (`pipeline.rs`), below every phase.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::TickError;
use super::bounds::InFlight;
use super::claim::{Claimer, Grouping};
use super::mark::{Batch, Marker};
use super::pipeline::Pipeline;
use super::send::Sender;
use crate::domain::Attempted;

/// Runs the phases, each a task of its own, until the claimer runs
/// out of work (or stops) and everything it claimed has been attempted
/// and recorded. Meanwhile keeps the run's lease ahead of the database
/// clock. The phase tasks are aborted if this future is dropped; a
/// phase that panics ends the tick with an error (its rows are returned
/// like any unsent row), never the process.
pub(super) async fn claim_send_record(
    pipeline: &Arc<Pipeline>,
    grouping: Arc<dyn Grouping>,
) -> Result<(), TickError> {
    let reminders = &pipeline.ctx().settings.reminders;
    let in_flight = InFlight::new(
        reminders.send_concurrency,
        pipeline.ctx().settings.smtp.pool_size,
    );
    let (to_mark, claimed) = mpsc::channel::<Batch>(1);
    // Never full: marked rows are bounded by the in-flight limit.
    let (to_send, marked) = mpsc::channel(in_flight.size());
    // Never full: rows in flight are bounded by the claim bound.
    let (to_record, results) = mpsc::channel::<Vec<Attempted>>(pipeline.bound().max());
    let span = tracing::Span::current();
    let mut phases = JoinSet::new();
    let p = Arc::clone(pipeline);
    // Rows whose recipients are all suppressed go from the claim
    // straight to the record phase, never marked or sent.
    let skipped = to_record.clone();
    phases.spawn(
        async move {
            let claimed = Claimer::new(p, skipped, grouping).run(&to_mark).await;
            drop(to_mark);
            claimed
        }
        .instrument(span.clone()),
    );
    let p = Arc::clone(pipeline);
    phases.spawn(
        Marker::new(p, in_flight)
            .run(claimed, results, to_send)
            .instrument(span.clone()),
    );
    let p = Arc::clone(pipeline);
    phases.spawn(
        async move {
            Sender::new(p).run(marked, to_record).await;
            Ok(())
        }
        .instrument(span),
    );
    let work = async {
        let mut first_error = Ok(());
        while let Some(ended) = phases.join_next().await {
            let ended = ended.unwrap_or_else(|e| Err(TickError::Stage(e.to_string())));
            if first_error.is_ok() {
                first_error = ended;
            }
        }
        first_error
    };
    tokio::select! {
        done = work => done,
        never = pipeline.keep_lease() => match never {},
    }
}
