//! Deciding what to claim from a page, as pure functions over what the
//! page said (`window.rs` reads it; nothing here touches a database).
//!
//! The rule in both groupings: **a row that cannot be mailed takes no room
//! and holds nothing back.** A key on several rows, a row that fails its
//! check (`SourceRow::into_parts`) is reported and left out before anything is
//! counted; a row whose every address is suppressed is claimed (to be
//! recorded `skipped`) but takes no place in a mail; a sound row the gap
//! keeps back is left for a later tick, or, when the gap lasts past the
//! last day of its step's window, recorded `superseded` (never silently
//! skipped).
//! So a customer's clean invoices are always the ones its mail lists.

use std::collections::HashSet;

use chrono::NaiveDate;

use crate::db::claims::Superseded;
use crate::db::customers::{CustomerRow, Owes};
use crate::db::source_row::SourceRow;
use crate::domain::StepKey;
use crate::domain::{InvoiceId, Problem, ReminderId, SourceProblem};
use crate::stages::shift;

/// The keys that occur more than once among `keys`.
pub(super) fn repeated<K: std::hash::Hash + Eq>(keys: impl IntoIterator<Item = K>) -> HashSet<K> {
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for key in keys {
        if let Some(again) = seen.replace(key) {
            twice.insert(again);
        }
    }
    twice
}

/// Invoice mode: the keys of a page worth claiming, each once. A row with
/// a problem is reported and left out; a key on several rows of the page
/// goes to the claim unchecked, which refuses and reports it.
pub(super) fn invoice_keys(
    rows: Vec<SourceRow>,
    problem: &mut impl FnMut(SourceProblem),
) -> Vec<InvoiceId> {
    let repeated_ids = repeated(rows.iter().filter_map(|r| r.invoice_id.clone()));
    let mut ids = Vec::with_capacity(rows.len());
    let mut taken = HashSet::new();
    for row in rows {
        let repeated = row
            .invoice_id
            .as_ref()
            .is_some_and(|id| repeated_ids.contains(id));
        if !repeated && let Err(p) = row.clone().into_parts() {
            problem(p);
            continue;
        }
        if let Some(id) = row.invoice_id
            && taken.insert(id.clone())
        {
            ids.push(id);
        }
    }
    ids
}

/// The last day an invoice due on `due` owes the step whose window starts
/// at `step_from` today (None: the last step, which never ends).
pub(super) fn last_day(
    today: NaiveDate,
    step_from: Option<NaiveDate>,
    due: NaiveDate,
) -> Option<NaiveDate> {
    let from = step_from?;
    Some(shift(today, due.signed_duration_since(from).num_days()))
}

/// Invoice mode: the held rows of a page whose step the gap keeps back
/// past its window (`window_from`: the window's `due_from` today), as
/// superseded; a held row with a problem is reported instead.
pub(super) fn superseded_of_page(
    held: &[(SourceRow, NaiveDate)],
    step: &StepKey,
    window_from: Option<NaiveDate>,
    today: NaiveDate,
    problem: &mut impl FnMut(SourceProblem),
) -> Vec<Superseded> {
    let mut steps = Vec::new();
    for (row, until) in held {
        if let Err(p) = row.clone().into_parts() {
            problem(p);
            continue;
        }
        let last = row
            .due_date
            .and_then(|due| last_day(today, window_from, due));
        steps.extend(superseded(row, step, last, *until));
    }
    steps
}

/// A step kept back by the gap until `gap_until`, as superseded if that is
/// after the last day of its window.
pub(super) fn superseded(
    row: &SourceRow,
    step: &StepKey,
    last: Option<NaiveDate>,
    gap_until: NaiveDate,
) -> Option<Superseded> {
    let last = last?;
    let invoice_id = row.invoice_id.clone()?;
    (gap_until > last).then(|| Superseded {
        invoice_id,
        step: step.clone(),
        customer_id: row.customer_id.clone(),
        reason: format!(
            "superseded: reminders.min_days_between keeps this step back until {gap_until}, after its last day, {last}"
        ),
    })
}

/// One row a statement claims: its key, and the `failed` row it retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub key: InvoiceId,
    pub retry: Option<ReminderId>,
}

/// One customer's statement, as chosen from a page: the rows to claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Statement {
    pub customer: String,
    /// The rows its mail lists, oldest due date first.
    pub letter: Vec<Pick>,
    /// Rows claimed only to be recorded `skipped` (every address
    /// suppressed): no place in the mail.
    pub skipped: Vec<Pick>,
    /// The Message-ID an earlier, unknown mail of these rows carried: the
    /// statement is that mail again (a resend), under it.
    pub resend_of: Option<String>,
    /// The customer has more to mail than this statement lists: the rest
    /// goes on the next tick (`reminders.continued`).
    pub continued: bool,
    /// Those rows' keys, oldest due date first (not claimed now).
    pub later: Vec<InvoiceId>,
}

impl Statement {
    pub fn rows(&self) -> usize {
        self.letter.len().saturating_add(self.skipped.len())
    }

    /// Every row to claim.
    pub fn picks(&self) -> impl Iterator<Item = &Pick> {
        self.letter.iter().chain(&self.skipped)
    }
}

/// What a page of whole customers gives: one statement per customer that
/// has something to mail, the customers that wait for a retry's backoff,
/// and the steps to record `superseded`.
#[derive(Debug, Clone, Default)]
pub struct Chosen {
    pub statements: Vec<Statement>,
    pub waiting: Vec<String>,
    pub superseded: Vec<Superseded>,
}

/// Customer mode: each customer's statement from `rows` (whole customers,
/// in customer order): at most `per_mail` mailable rows, oldest due date
/// first, besides the rows to record `skipped` (every address in
/// `suppressed`). A customer with a retry whose backoff is not over waits,
/// so the retry and anything new go out together; a resend of an unknown
/// statement goes as it was, alone, and the rest follows on the next tick.
pub fn statements(
    rows: Vec<CustomerRow>,
    per_mail: usize,
    suppressed: &HashSet<String>,
    today: NaiveDate,
    problem: &mut impl FnMut(SourceProblem),
) -> Chosen {
    let mut chosen = Chosen::default();
    let mut rows = rows.into_iter().peekable();
    while let Some(first) = rows.next() {
        let mut customer = vec![first];
        while let Some(next) = rows.next_if(|r| r.row.customer_id == customer[0].row.customer_id) {
            customer.push(next);
        }
        match one_customer(
            customer,
            per_mail,
            suppressed,
            today,
            problem,
            &mut chosen.superseded,
        ) {
            Choice::Mail(statement) => chosen.statements.push(statement),
            Choice::Waits(customer) => chosen.waiting.push(customer),
            Choice::Nothing => {}
        }
    }
    chosen
}

/// A row fit to mail, or to record `skipped`.
struct Fit {
    key: InvoiceId,
    retry: Option<(ReminderId, Option<String>)>,
    all_suppressed: bool,
}

impl Fit {
    fn pick(self) -> Pick {
        Pick {
            key: self.key,
            retry: self.retry.map(|(id, _)| id),
        }
    }
}

/// What one customer gets today.
enum Choice {
    Mail(Statement),
    /// A retry's backoff is not over: everything waits for it.
    Waits(String),
    Nothing,
}

fn one_customer(
    rows: Vec<CustomerRow>,
    per_mail: usize,
    suppressed: &HashSet<String>,
    today: NaiveDate,
    problem: &mut impl FnMut(SourceProblem),
    superseded_steps: &mut Vec<Superseded>,
) -> Choice {
    let Some(customer) = rows.first().and_then(|r| r.row.customer_id.clone()) else {
        return Choice::Nothing;
    };
    let waits = rows.iter().any(|r| r.owes == Owes::Waiting);
    let mut fit = Vec::new();
    let mut taken = HashSet::new();
    for r in rows {
        if r.copies > 1 {
            problem(r.row.problem(
                Problem::RepeatedKey,
                format!("{} rows of the source have this invoice_id", r.copies),
            ));
            continue;
        }
        let customer_row = match r.row.clone().into_parts() {
            Ok((_, customer)) => customer,
            Err(p) => {
                problem(p);
                continue;
            }
        };
        let owes = match r.owes {
            Owes::Held(until) => {
                let last = r
                    .row
                    .due_date
                    .and_then(|due| last_day(today, r.step_from, due));
                superseded_steps.extend(superseded(&r.row, &r.step, last, until));
                continue;
            }
            owes => owes,
        };
        let Some(key) = r.row.invoice_id.clone() else {
            continue;
        };
        if waits || !taken.insert(key.clone()) {
            continue;
        }
        let all_suppressed = customer_row
            .email
            .addresses()
            .iter()
            .all(|a| suppressed.contains(&a.to_string().to_lowercase()));
        let retry = match owes {
            Owes::Retry { id, message_id } => Some((id, message_id)),
            _ => None,
        };
        fit.push(Fit {
            key,
            retry,
            all_suppressed,
        });
    }
    if waits {
        return Choice::Waits(customer);
    }
    let (skipped, mailable): (Vec<Fit>, Vec<Fit>) = fit.into_iter().partition(|f| f.all_suppressed);
    let resend_of = mailable
        .iter()
        .find_map(|f| f.retry.as_ref().and_then(|(_, m)| m.clone()));
    let (letter, rest): (Vec<Fit>, Vec<Fit>) = match &resend_of {
        Some(m) => mailable
            .into_iter()
            .partition(|f| f.retry.as_ref().and_then(|(_, stored)| stored.as_ref()) == Some(m)),
        None => {
            let mut mailable = mailable;
            let rest = mailable.split_off(mailable.len().min(per_mail.max(1)));
            (mailable, rest)
        }
    };
    let statement = Statement {
        customer,
        letter: letter.into_iter().map(Fit::pick).collect(),
        skipped: skipped.into_iter().map(Fit::pick).collect(),
        resend_of,
        continued: !rest.is_empty(),
        later: rest.into_iter().map(|f| f.key).collect(),
    };
    if statement.rows() == 0 {
        return Choice::Nothing;
    }
    Choice::Mail(statement)
}

#[cfg(test)]
mod tests;
