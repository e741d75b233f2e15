//! The claim phase: what a tick owes is read from the source, chosen,
//! claimed under UNIQUE (invoice_id, period), and handed on as letters
//! (the rows of one mail) to be marked and sent.
//!
//! How a row moves through this folder:
//!
//! ```text
//! tidy.rs       retire failed rows that will never be sent, return what
//!               ended runs never started, report rows no page can meet
//!     │
//! Grouping      one choice, made when the tick's pipeline is built
//!     │         (grouping.rs): one mail per invoice (by_invoice.rs) or
//!     │         one statement per customer (by_customer.rs); it walks:
//!     ▼
//! pages.rs      read a page of the source: rows that owe today's step,
//!     │         or a retry, or are kept back by the gap
//! choose.rs     decide what to claim: rows that cannot be mailed (a
//!     │         repeated key, a broken row, every address suppressed)
//!     │         take no room in a mail; a step the gap keeps back past
//!     │         its window is recorded `superseded`
//! claiming.rs   claim it: room in the claim bound, one statement that
//!     │         re-checks everything, the fence
//! hand_on.rs    check the claimed rows again, leave suppressed addresses
//!               out, make letters (each with its Message-ID), pass them
//!               to the marker
//! ```
//!
//! A claimed row that is not handed on is never marked: the end of the run
//! hands it back (`returned::hand_back` sweeps the run's unstarted rows, so
//! even a claim whose reply was lost leaves nothing behind). Below this
//! phase nothing asks which grouping is in use: a letter carries its kind
//! and its Message-ID.

mod by_customer;
mod by_invoice;
pub(super) mod choose;
mod claiming;
mod grouping;
mod hand_on;
pub(super) mod pages;
mod tidy;

use std::sync::Arc;

use tokio::sync::mpsc;

use super::TickError;
use super::mark::Batch;
use super::pipeline::Pipeline;
use crate::config::{GroupBy, ReminderSettings};
use crate::domain::Attempted;
pub(super) use grouping::Grouping;

/// The one place the grouping mode is read: how reminders are grouped into
/// mails.
pub(super) fn grouping_for(reminders: &ReminderSettings) -> Arc<dyn Grouping> {
    match reminders.group_by {
        GroupBy::Invoice => Arc::new(by_invoice::InvoiceMails),
        GroupBy::Customer => Arc::new(by_customer::CustomerStatements::new(reminders)),
    }
}

/// The claim phase of one tick.
pub(super) struct Claimer {
    claiming: claiming::Claiming,
    grouping: Arc<dyn Grouping>,
}

impl Claimer {
    /// `skipped`: the record phase, where claimed rows that are not sent at
    /// all (every recipient suppressed) go.
    pub fn new(
        p: Arc<Pipeline>,
        skipped: mpsc::Sender<Vec<Attempted>>,
        grouping: Arc<dyn Grouping>,
    ) -> Self {
        Self {
            claiming: claiming::Claiming::new(p, skipped),
            grouping,
        }
    }

    /// Tidies up, then walks the source, claiming and handing on letters
    /// until it runs out of work or the tick stops.
    pub async fn run(self, batches: &mpsc::Sender<Batch>) -> Result<(), TickError> {
        let c = &self.claiming;
        tidy::tidy_up(c).await?;
        tidy::report_unusable_rows(c, &*self.grouping).await?;
        self.grouping.walk(c, batches).await
    }
}
