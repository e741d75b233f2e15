//! Handing claimed rows on: each is checked again (it may have changed
//! since the page), its suppressed addresses left out, and the rows to
//! mail go to the marker as letters. A claimed row that is not handed on
//! is never marked: the end of the run hands it back.
//!
//! Each claimed batch is checked against the suppression list by the
//! claim itself, in its own transaction: a row whose recipients are all suppressed goes straight to
//! the record phase (`skipped`, reason `suppressed`), never marked or sent;
//! from a row with some of them suppressed, those are left out of `To`.

use std::collections::HashSet;

use tokio::sync::mpsc;

use super::choose::repeated;
use super::claiming::Claiming;
use crate::db::reminders::ClaimedRow;
use crate::domain::Recipients;
use crate::domain::{Attempted, Claimed, Counts, Delivery, Letter, Problem, SkipReason, count_of};
use crate::tick::mark::Batch;
use lettre::Address;

/// The claimed rows worth sending, checked again. A row that fails its
/// check now, or whose reminder id came back more than once, is dropped
/// (its room freed; the end of the run hands it back). Rows whose recipients
/// are all suppressed (`suppressed`: the claim's answer, lower-cased) go
/// to the record phase instead.
pub(super) async fn screen(
    c: &Claiming,
    rows: Vec<ClaimedRow>,
    suppressed: &HashSet<String>,
) -> Vec<Claimed> {
    c.p().add(&Counts {
        claimed: count_of(rows.len()),
        ..Counts::default()
    });
    let twice = repeated(rows.iter().map(|r| r.id));
    let mut reported = HashSet::new();
    let mut batch = Vec::with_capacity(rows.len());
    let mut dropped = 0usize;
    for row in rows {
        let checked = if twice.contains(&row.id) {
            // Two source rows came back for one claim: believe neither.
            Err(row.source.problem(
                Problem::RepeatedKey,
                "the claim met several rows of the source with this invoice_id",
            ))
            .map_err(|p| (p, reported.insert(row.id)))
        } else {
            // A calendar no one knows is reported, and the row still goes
            // (by the window's days and hours alone).
            if let Some(problem) = row
                .source
                .calendar_problem(&c.p().ctx().settings.send_window.calendars)
            {
                c.p().problem(problem);
            }
            row.source.into_parts().map_err(|p| (p, true))
        };
        match checked {
            Ok((invoice, customer)) => batch.push(Claimed {
                id: row.id,
                attempts: row.attempts,
                step: row.step,
                invoice,
                customer,
                thread: row.thread,
                stored_message_id: row.message_id,
            }),
            Err((problem, first)) => {
                if first {
                    c.p().problem(problem);
                }
                dropped = dropped.saturating_add(1);
            }
        }
    }
    c.p().bound().release(dropped);
    suppress(c, batch, suppressed).await
}

/// The rows of `batch` to send, each addressed to its recipients that are
/// not `suppressed`. Rows with none left are recorded `skipped` (sent to
/// the record phase, which frees their room).
async fn suppress(c: &Claiming, batch: Vec<Claimed>, suppressed: &HashSet<String>) -> Vec<Claimed> {
    if suppressed.is_empty() {
        return batch;
    }
    let mut to_send = Vec::with_capacity(batch.len());
    for mut row in batch {
        let all = row.customer.email.addresses().len();
        let kept: Vec<Address> = row
            .customer
            .email
            .addresses()
            .iter()
            .filter(|a| !suppressed.contains(&a.to_string().to_lowercase()))
            .cloned()
            .collect();
        if kept.len() == all {
            to_send.push(row);
        } else if let Some(kept) = Recipients::of(kept) {
            tracing::debug!(
                invoice_id = %row.invoice.id,
                left_out = all.saturating_sub(kept.addresses().len()),
                "suppressed recipients left out of To"
            );
            row.customer.email = kept;
            to_send.push(row);
        } else {
            tracing::info!(invoice_id = %row.invoice.id, period = %row.step, "every recipient is suppressed; reminder skipped");
            let skipped = Attempted {
                id: row.id,
                invoice: row.invoice.id,
                step: row.step,
                attempts_before: row.attempts,
                message_id: row.stored_message_id.unwrap_or_default(),
                delivery: Delivery::Skipped {
                    reason: SkipReason::Suppressed,
                },
            };
            if c.skipped().send(vec![skipped]).await.is_err() {
                // The record phase is gone: the end of the run hands it back.
                c.p().bound().release(1);
            }
        }
    }
    to_send
}

/// Passes `letters` to the marker; false if it is gone (the rows, never
/// marked, are handed back at the end of the run).
pub(super) async fn pass_on(
    c: &Claiming,
    batches: &mpsc::Sender<Batch>,
    letters: Vec<Letter>,
) -> bool {
    if letters.is_empty() {
        return true;
    }
    match batches.send(letters).await {
        Ok(()) => true,
        Err(gone) => {
            c.p()
                .bound()
                .release(gone.0.iter().map(|l| l.rows.len()).sum());
            false
        }
    }
}
