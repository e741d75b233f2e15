//! How reminders are grouped into mails: the one choice the claim phase
//! makes once (`claim::grouping_for`), as a value that carries the
//! behaviour. Everything that differs between one mail per invoice and one
//! statement per customer is behind [`Grouping`]: how the source is
//! walked, which rows go into one letter, and which rows no walk can meet.

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::claiming::Claiming;
use crate::db::source_row::SourceRow;
use crate::domain::SourceProblem;
use crate::tick::TickError;
use crate::tick::mark::Batch;

/// How reminders are grouped into mails.
pub(in crate::tick) trait Grouping: Send + Sync {
    /// Walks today's source: reads, chooses, claims and hands on letters
    /// until there is nothing left or the tick stops.
    fn walk<'a>(
        &'a self,
        c: &'a Claiming,
        batches: &'a mpsc::Sender<Batch>,
    ) -> BoxFuture<'a, Result<(), TickError>>;

    /// The most rows one letter holds (the claim bound keeps room for the
    /// letters the in-flight limit holds).
    fn rows_per_letter(&self) -> usize;

    /// A row the walk never meets, as the problem it is (besides a NULL
    /// key or due date, which no walk meets).
    fn unmet(&self, row: &SourceRow) -> Option<SourceProblem>;
}
