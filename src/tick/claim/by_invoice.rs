//! One mail per invoice (`reminders.group_by = "invoice"`): retries first,
//! then each step's window, oldest due dates first, page by page; every
//! claimed row is a letter of its own, under the reminder's Message-ID
//! (`invoice-{id}.{step}@…`: the same reminder always carries the same
//! one).

use std::collections::HashSet;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::choose::{invoice_keys, superseded_of_page};
use super::claiming::Claiming;
use super::grouping::Grouping;
use super::hand_on::{pass_on, screen};
use crate::db;
use crate::db::claims::PageChoice;
use crate::db::invoices::{OverdueKey, OwedPage};
use crate::db::reminders::ClaimedRow;
use crate::db::source_row::SourceRow;
use crate::domain::{Claimed, Letter, LetterKind, SourceProblem};
use crate::mail;
use crate::stages::Window;
use crate::tick::TickError;
use crate::tick::mark::Batch;
use crate::tick::timings::Spent;

/// One mail per invoice.
pub(super) struct InvoiceMails;

impl Grouping for InvoiceMails {
    fn walk<'a>(
        &'a self,
        c: &'a Claiming,
        batches: &'a mpsc::Sender<Batch>,
    ) -> BoxFuture<'a, Result<(), TickError>> {
        Box::pin(async move {
            if !claim_retries(c, batches).await? {
                return Ok(());
            }
            for window in c.windows() {
                if !claim_window(c, window, batches).await? {
                    break;
                }
            }
            Ok(())
        })
    }

    fn rows_per_letter(&self) -> usize {
        1
    }

    fn unmet(&self, _row: &SourceRow) -> Option<SourceProblem> {
        None
    }
}

/// Re-claims failed rows whose backoff is over, a batch at a time.
/// Ok(false): stop claiming altogether.
async fn claim_retries(c: &Claiming, batches: &mpsc::Sender<Batch>) -> Result<bool, TickError> {
    loop {
        let Some(limit) = c.room(0) else {
            return Ok(false);
        };
        let Some(reserved) = c
            .reserve(usize::try_from(limit).unwrap_or(usize::MAX))
            .await
        else {
            return Ok(false);
        };
        let reclaimed = db::claims::reclaim_failed(
            &c.p().ctx().phases.claims,
            c.today(),
            c.retries(),
            limit,
            c.p().fence(),
        )
        .await;
        let Some(claim) = c.fenced(reclaimed, "re-claiming failed reminders")? else {
            return Ok(false);
        };
        reserved.keep(claim.claimed.len());
        if claim.claimed.is_empty() {
            return Ok(true);
        }
        if !hand_on(c, batches, claim.claimed, &claim.suppressed).await {
            return Ok(false);
        }
    }
}

/// Claims the invoices of one step's window, page by page, each page read
/// and claimed in one transaction. Ok(false): stop claiming altogether
/// (stopped, fenced, limit reached).
async fn claim_window(
    c: &Claiming,
    window: &Window,
    batches: &mpsc::Sender<Batch>,
) -> Result<bool, TickError> {
    let mut after: Option<OverdueKey> = None;
    loop {
        let Some(limit) = c.room(0) else {
            return Ok(false);
        };
        // Room for the whole page, before its transaction begins: what
        // the claim does not take goes back at once.
        let Some(reserved) = c
            .reserve(usize::try_from(limit).unwrap_or(usize::MAX))
            .await
        else {
            return Ok(false);
        };
        let choose = |page: OwedPage| PageChoice {
            superseded: superseded_of_page(
                &page.held,
                &window.step.key,
                window.due_from,
                c.today().date,
                &mut |p| c.p().problem(p),
            ),
            keys: invoice_keys(page.owed, &mut |p| c.p().problem(p)),
        };
        let claiming = db::claims::claim_page(
            &c.p().ctx().phases.claims,
            window,
            c.today(),
            after.clone(),
            limit,
            c.p().run_id(),
            c.p().fence(),
            choose,
        );
        let done = c.p().timings().time(Spent::ClaimStatements, claiming).await;
        let Some(mut done) = c.fenced(done, "claiming reminders")? else {
            return Ok(false);
        };
        c.superseded(done.superseded);
        let full_page = done.examined >= usize::try_from(limit).unwrap_or(usize::MAX);
        let suppressed = std::mem::take(&mut done.claim.suppressed);
        let rows = c.took(done.asked, done.claim);
        reserved.keep(rows.len());
        if !rows.is_empty() && !hand_on(c, batches, rows, &suppressed).await {
            return Ok(false);
        }
        let Some(last) = done.last else {
            return Ok(true);
        };
        after = Some(last);
        if !full_page {
            return Ok(true);
        }
    }
}

/// Checks claimed rows and passes each on as a letter of its own.
async fn hand_on(
    c: &Claiming,
    batches: &mpsc::Sender<Batch>,
    rows: Vec<ClaimedRow>,
    suppressed: &HashSet<String>,
) -> bool {
    let domain = &c.p().ctx().settings.smtp.message_id_domain;
    let letters = screen(c, rows, suppressed)
        .await
        .into_iter()
        .map(|row| letter(row, domain))
        .collect();
    pass_on(c, batches, letters).await
}

/// A reminder's letter, under its Message-ID.
fn letter(row: Claimed, domain: &str) -> Letter {
    let message_id = mail::message_id(&row.invoice.id, &row.step, domain);
    let fresh_message_id = row.stored_message_id.as_deref() != Some(message_id.as_str());
    Letter {
        rows: vec![row],
        message_id,
        fresh_message_id,
        kind: LetterKind::Reminder,
    }
}
