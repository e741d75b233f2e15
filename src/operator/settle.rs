//! Settling unknown deliveries: the operator checked the mail server's
//! log for the stored Message-ID and says whether the mail went out
//! (`settle --sent|--resend`, the console's Unknown page). One mail is
//! settled as a whole: naming one row of a statement settles every
//! unknown row that shares its Message-ID, and says so. Rows that are not
//! unknown are refused, and so is resending a step that is no longer the
//! invoice's due step. [`settle`] reads, plans, writes (with the console
//! user's activity record in the same transaction) and reports, once for
//! both.

use std::collections::BTreeSet;

use anyhow::Context as _;

use super::desk::Desk;
use super::{Actor, db_failed};
use crate::db;
use crate::db::activity::NewActivity;
use crate::db::settle::NamedRow;
pub use crate::db::settle::Settlement;
use crate::domain::ReminderId;

/// What is named to settle.
#[derive(Debug, Clone)]
pub enum Named {
    /// Reminder ids, as `settle` takes them.
    Reminders(Vec<ReminderId>),
    /// The unknown rows of one stored Message-ID, as the console names a
    /// mail.
    Message(String),
}

/// What settling did: a line per row settled, refused or pulled in with
/// its mail, and how many were refused. `found` is false when nothing
/// named exists (or, for a Message-ID, is still unknown).
#[derive(Debug, Default)]
pub struct Settled {
    pub notes: Vec<String>,
    pub refused: usize,
    pub found: bool,
}

/// Settles what `named` names as `settlement` says, by `actor`; `reason`
/// goes in a console user's activity record.
pub async fn settle(
    desk: &Desk,
    named: &Named,
    settlement: Settlement,
    actor: Actor<'_>,
    reason: Option<&str>,
) -> anyhow::Result<Settled> {
    let today = desk
        .owing_day()
        .await
        .context("failed to read the database clock")?;
    let db = desk.db();
    let (ids, message) = match named {
        Named::Reminders(ids) => (ids.as_slice(), None),
        Named::Message(m) => (&[][..], Some(m.as_str())),
    };
    let rows = db::settle::named_rows(db, ids, message, &today)
        .await
        .map_err(db_failed("failed to read the reminders"))?;
    let mut notes = Vec::new();
    let mut refused = 0;
    for id in ids {
        if !rows.iter().any(|r| r.id == *id) {
            notes.push(format!("reminder {id}: no such reminder; unchanged"));
            refused += 1;
        }
    }
    let resending = settlement == Settlement::Resend;
    let plan = plan(&rows, resending);
    let eligible: Vec<ReminderId> = plan.eligible.iter().copied().collect();
    let subject = match named {
        Named::Message(m) => format!("Message-ID <{m}>"),
        Named::Reminders(ids) => format!("reminders {}", list(ids)),
    };
    let activity = match actor {
        Actor::CommandLine => None,
        Actor::Console(user) => Some(NewActivity {
            user_name: user,
            action: if resending { "resend" } else { "settle sent" },
            subject: &subject,
            reason: reason.filter(|r| !r.is_empty()),
        }),
    };
    let changed = db::settle::settle(db, &eligible, settlement, activity.as_ref())
        .await
        .map_err(db_failed("failed to update the reminders"))?;
    let done = settled(&rows, &plan, &changed, resending);
    notes.extend(plan.notes);
    notes.extend(done.notes);
    Ok(Settled {
        notes,
        refused: refused + plan.refused + done.refused,
        found: rows.iter().any(|r| r.named),
    })
}

fn list(ids: &[ReminderId]) -> String {
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What settling the named rows does: the rows to change (every unknown
/// row of a named row's mail), and a line for each row refused or pulled
/// in with its mail.
#[derive(Debug, Default)]
struct Plan {
    eligible: BTreeSet<ReminderId>,
    notes: Vec<String>,
    refused: usize,
}

/// The decision made over `rows` (from `db::settle::named_rows`): only unknown rows change, a mail is
/// settled as a whole, and a step no longer due is not resent.
fn plan(rows: &[NamedRow], resending: bool) -> Plan {
    let mut plan = Plan::default();
    let mut settled: BTreeSet<Option<&str>> = BTreeSet::new();
    for row in rows.iter().filter(|r| r.named) {
        if !row.unknown {
            plan.notes.push(format!(
                "{}: its delivery is not unknown (status {}); unchanged",
                what(row),
                row.status
            ));
            plan.refused += 1;
            continue;
        }
        let mail = mail_of(rows, row);
        if row.message_id.is_some() && !settled.insert(row.message_id.as_deref()) {
            continue;
        }
        if mail.len() > 1 {
            let ids: Vec<String> = mail.iter().map(|r| r.id.to_string()).collect();
            plan.notes.push(format!(
                "{}: one mail, Message-ID <{}>, with reminders {}: all of it is settled",
                what(row),
                row.message_id.as_deref().unwrap_or_default(),
                ids.join(", ")
            ));
        }
        for r in mail {
            if resending && r.due_step.as_deref() != Some(r.step.as_str()) {
                let now = r.due_step.as_deref().unwrap_or("none");
                plan.notes.push(format!(
                    "{}: step {} is no longer due (due step now: {now}); not resent (use --sent, or leave it)",
                    what(r),
                    r.step
                ));
                plan.refused += 1;
            } else {
                plan.eligible.insert(r.id);
            }
        }
    }
    plan
}

/// One line per row of `plan` once the update ran: settled, or changed
/// meanwhile (counted refused).
fn settled(rows: &[NamedRow], plan: &Plan, changed: &[ReminderId], resending: bool) -> Plan {
    let mut done = Plan::default();
    for row in rows.iter().filter(|r| plan.eligible.contains(&r.id)) {
        let message_id = row
            .message_id
            .as_deref()
            .map(|m| format!(", Message-ID <{m}>"))
            .unwrap_or_default();
        if !changed.contains(&row.id) {
            done.notes
                .push(format!("{}: changed meanwhile; unchanged", what(row)));
            done.refused += 1;
        } else if resending {
            done.eligible.insert(row.id);
            done.notes.push(format!(
                "{}{message_id}: unknown -> failed; the next tick sends it again",
                what(row)
            ));
        } else {
            done.eligible.insert(row.id);
            done.notes
                .push(format!("{}{message_id}: unknown -> sent", what(row)));
        }
    }
    done
}

/// "reminder 7 (invoice 42, overdue)".
fn what(row: &NamedRow) -> String {
    format!(
        "reminder {} (invoice {}, {})",
        row.id, row.invoice_id, row.step
    )
}

/// The unknown rows of `row`'s mail: those sharing its stored Message-ID,
/// or the row alone when it has none.
fn mail_of<'a>(rows: &'a [NamedRow], row: &'a NamedRow) -> Vec<&'a NamedRow> {
    match &row.message_id {
        Some(m) => rows
            .iter()
            .filter(|r| r.unknown && r.message_id.as_ref() == Some(m))
            .collect(),
        None => vec![row],
    }
}
