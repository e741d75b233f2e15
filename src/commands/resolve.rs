//! `resolve`: settle unknown deliveries without writing SQL. `--sent` once
//! the mail server's log shows the stored Message-ID went out, `--resend`
//! once it shows it did not. One mail is settled as a whole: naming one
//! row of a statement settles every unknown row that shares its
//! Message-ID, and says so. Rows that are not unknown are refused, and so
//! is resending a step that is no longer the invoice's due step.

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{connect, exit};
use crate::config::Settings;
use crate::db;
use crate::db::owing::Today;
use crate::db::resolve::NamedRow;
use crate::domain::ReminderId;

pub(super) async fn resolve(
    settings: &Settings,
    sent: Vec<i64>,
    resend: Vec<i64>,
) -> anyhow::Result<ExitCode> {
    let database = connect(settings).await?;
    super::check_source(&database).await?;
    let today = db::today(&database, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let resending = !resend.is_empty();
    let named: Vec<ReminderId> = sent
        .iter()
        .chain(&resend)
        .copied()
        .map(ReminderId)
        .collect();
    let rows = db::resolve::named_rows(&database, &named, &Today::from_settings(settings, today))
        .await
        .map_err(super::db_failed("failed to read the reminders"))?;
    let mut refused = 0;
    for id in &named {
        if !rows.iter().any(|r| r.id == *id) {
            outln!("reminder {id}: no such reminder; unchanged");
            refused += 1;
        }
    }
    let plan = plan(&rows, resending);
    for line in &plan.notes {
        outln!("{line}");
    }
    refused += plan.refused;
    let ids: Vec<ReminderId> = plan.eligible.iter().copied().collect();
    let changed = if resending {
        db::resolve::mark_for_resend(&database, &ids).await
    } else {
        db::resolve::mark_sent(&database, &ids).await
    }
    .context("failed to update the reminders")?;
    let done = settled(&rows, &plan, &changed, resending);
    for line in &done.notes {
        outln!("{line}");
    }
    refused += done.refused;
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    })
}

/// What settling the named rows does: the rows to change (every unknown
/// row of a named row's mail), and a line for each row refused or pulled
/// in with its mail.
#[derive(Debug, Default)]
pub struct Plan {
    pub eligible: BTreeSet<ReminderId>,
    pub notes: Vec<String>,
    pub refused: usize,
}

/// The decision `resolve` makes over `rows` (from
/// `db::resolve::named_rows`): only unknown rows change, a mail is
/// settled as a whole, and a step no longer due is not resent.
pub fn plan(rows: &[NamedRow], resending: bool) -> Plan {
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
            if resending && r.due_step.as_deref() != Some(r.period.as_str()) {
                let now = r.due_step.as_deref().unwrap_or("none");
                plan.notes.push(format!(
                    "{}: step {} is no longer due (due step now: {now}); not resent (use --sent, or leave it)",
                    what(r),
                    r.period
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
pub fn settled(rows: &[NamedRow], plan: &Plan, changed: &[ReminderId], resending: bool) -> Plan {
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
        row.id, row.invoice_id, row.period
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
