//! The decision behind `explain`, as pure functions over what the database
//! said about one invoice ([`Facts`]): one [`Reason`] for what happens to
//! it today, the first that applies in a fixed order, and the step and
//! date it will next be reminded on if nothing changes but the date.
//!
//! It follows the tick, not a description of it: the due step is
//! `Stages::due_step`, a row's fitness is `SourceRow::into_parts`, and the paid
//! and paused test, a run being over and the retry wait come from the
//! claim's own SQL fragments (`db::explain`). What is decided here is only
//! which of those facts speaks first, and, for the dates to come, where
//! each wait ends: `paused_until` the day after it, the gap
//! `min_days_between` days after the last reminder's `claimed_at` date, a
//! retry on its backoff's date, each step within its own date range.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use super::report::{
    Explained, Occurrence, Reason, ReminderView, RowState, SourceView, Until, Unusable, count,
};
use crate::db::explain::{ReminderFacts, SourceFacts};
use crate::domain::{InvoiceId, Problem, SkipReason};
use crate::stages::Stages;

/// What the configuration says about reminders, as the tick uses it.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub stages: &'a Stages,
    pub min_days_between: u32,
    pub max_attempts: u32,
    /// `[late_payment]`, with its rates.
    pub late_payment: &'a crate::config::LatePaymentSettings,
}

/// What the database said about one invoice.
#[derive(Debug, Clone)]
pub struct Facts {
    pub invoice_id: InvoiceId,
    /// The database's date in `timezone`.
    pub today: NaiveDate,
    /// The customers' zone.
    pub timezone: String,
    pub sources: Vec<SourceFacts>,
    pub reminders: Vec<ReminderFacts>,
    /// The recipients of the source row that are on the suppression list.
    pub suppressed: Vec<crate::db::suppressions::Suppression>,
    /// Every recipient is suppressed (the tick records `skipped`).
    pub all_suppressed: bool,
    /// Customer mode: the latest day another invoice of the customer got a
    /// reminder (`sent` or `sending`) that started the gap; the gap counts
    /// per customer.
    pub customer_last: Option<NaiveDate>,
    /// Customer mode: where the invoice stands in what its customer gets
    /// next, as the tick chooses it.
    pub customer_place: Option<CustomerPlace>,
    /// The console pause of the invoice or its customer, if any.
    pub console_pause: Option<crate::db::pauses::ConsolePause>,
    /// Every payment object's hold on it, in force or not.
    pub payment_holds: Vec<crate::db::payments::PaymentHold>,
}

/// Customer mode: where an invoice stands in its customer's mail today.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CustomerPlace {
    /// The next tick's statement lists it.
    Next,
    /// The next statement is full: `ahead` invoices come first, this one
    /// goes in a later statement today.
    Later { ahead: usize, per_mail: usize },
    /// A failed statement of the customer waits for its backoff.
    WaitsForRetry,
    /// The tick would not mail it (a source problem, the gap, ...): the
    /// other facts say why.
    Elsewhere,
}

/// A reason with its sentence and, for a wait, when it ends.
pub(super) type Decision = (Reason, String, Option<Until>);

/// Decides for `facts` under `rules`.
pub fn decide(facts: Facts, rules: Rules<'_>) -> Explained {
    let Facts {
        invoice_id,
        today,
        timezone,
        sources,
        reminders,
        suppressed,
        all_suppressed,
        customer_last,
        customer_place,
        console_pause,
        payment_holds,
    } = facts;
    let payment_hold = super::report::HoldInForce::of(&payment_holds);
    let rows: Vec<ReminderView> = reminders
        .into_iter()
        .map(|row| ReminderView {
            state: RowState::of(&row),
            row,
        })
        .collect();
    let copies = sources.first().map_or(0, |s| s.copies);
    let one = sources.first().filter(|_| copies == 1);
    let due_date = one.and_then(|s| s.row.due_date);
    let due_step = due_date.and_then(|d| rules.stages.due_step(d, today));
    let mut explained = Explained {
        invoice_id,
        today,
        timezone,
        calendar: None,
        reason: Reason::WillSendToday,
        reason_detail: String::new(),
        until: None,
        next_step: None,
        next_date: None,
        source: one.map(SourceView::from),
        source_rows: copies,
        source_problem: None,
        paid: one.map(|s| s.is_paid != Some(false)),
        paused: one.map(|s| s.paused == Some(true)),
        paused_until: one.and_then(|s| s.paused_until),
        console_pause: console_pause.clone(),
        payment_hold: payment_hold.clone(),
        payment_holds,
        due_date,
        days_overdue: due_date.map(|d| today.signed_duration_since(d).num_days()),
        due_step_today: due_step.map(|s| s.key.clone()),
        stages: due_date.map_or_else(Vec::new, |d| occurrences(rules.stages, d)),
        reminders: Vec::new(),
        suppressed,
        late_payment: None,
        late_payment_working: Vec::new(),
        window_closed_because: None,
        window_opens: None,
    };
    let unusable = match one {
        None if copies == 0 => Some((Unusable::NotInSource, not_in_source(&rows))),
        None => Some((
            Unusable::Row(Problem::RepeatedKey),
            format!(
                "{copies} rows of the source have this invoice_id; no reminder is sent until there is one"
            ),
        )),
        Some(s) => s.row.clone().into_parts().err().map(|p| {
            (
                Unusable::Row(p.problem),
                format!(
                    "{}: {}; no reminder is sent until the row is fixed",
                    p.problem, p.detail
                ),
            )
        }),
    };
    let decision = match (unusable, one, due_date) {
        (Some((problem, detail)), _, _) => {
            explained.source_problem = Some(problem);
            (Reason::SourceProblem, detail, None)
        }
        (None, Some(source), Some(due_date)) => {
            let day = Day {
                rules,
                today,
                due_date,
                source,
                rows: &rows,
                customer_last,
                console_pause: console_pause.as_ref(),
                payment_hold: payment_hold.as_ref(),
            };
            let decision = day.decision(due_step);
            if let Some((step, date)) = day.next_reminder() {
                explained.next_step = Some(step.key.clone());
                explained.next_date = Some(date);
            }
            decision
        }
        // `SourceRow::into_parts` passed: one row, with a due date.
        (None, _, _) => (
            Reason::SourceProblem,
            "the source row has no due date".into(),
            None,
        ),
    };
    let decision = suppressed_verdict(decision, all_suppressed, due_step, &rows);
    let invoice = one
        .and_then(|s| s.row.clone().into_parts().ok())
        .map(|(invoice, _)| invoice);
    let (claim, waiting) = invoice.as_ref().map_or((None, None), |invoice| {
        super::late::today(rules.stages, rules.late_payment, invoice, due_step, today)
    });
    if let (Some(claim), Some(invoice)) = (&claim, &invoice) {
        explained.late_payment_working =
            super::late::working(claim, invoice.amount.minor(), invoice.amount.currency());
    }
    explained.late_payment = claim;
    let decision = super::late::rates_verdict(decision, waiting.as_ref(), due_step);
    let decision = customer_decision(decision, customer_place);
    (explained.reason, explained.reason_detail, explained.until) = decision;
    explained.reminders = rows;
    explained
}

/// `suppressed` comes right after `paused`: today's due step was recorded
/// `skipped` (every recipient suppressed when it was claimed), or every
/// recipient is suppressed now and the decision was that something would be
/// sent (today, after a backoff or after the gap).
fn suppressed_verdict(
    decision: Decision,
    all_suppressed: bool,
    due_step: Option<&crate::stages::Step>,
    rows: &[ReminderView],
) -> Decision {
    let skipped_today = due_step.is_some_and(|step| {
        rows.iter().any(|r| {
            r.row.step == step.key
                && r.state == RowState::Skipped
                && r.row.last_error.as_deref() == Some(SkipReason::Suppressed.label())
        })
    });
    let would_send = matches!(
        decision.0,
        Reason::WillSendToday | Reason::BackoffUntil | Reason::MinGapUntil
    );
    match decision.0 {
        Reason::SourceProblem
        | Reason::Paid
        | Reason::Paused
        | Reason::PausedInConsole
        | Reason::HeldByPaymentSignal => decision,
        _ if skipped_today || (all_suppressed && would_send) => (
            Reason::Suppressed,
            "every recipient is on the suppression list (`suppress list`): no reminder goes to this invoice until one is removed".into(),
            None,
        ),
        _ => decision,
    }
}

/// Customer mode: an invoice the tick would claim today goes in the next
/// statement only if its customer's choice puts it there.
fn customer_decision(decision: Decision, place: Option<CustomerPlace>) -> Decision {
    if decision.0 != Reason::WillSendToday {
        return decision;
    }
    match place {
        Some(CustomerPlace::Later { ahead, per_mail }) => (
            Reason::LaterStatement,
            format!(
                "the customer's next statement is full (reminders.max_invoices_per_mail = {per_mail}) with {}: this one goes in a later statement today, one a tick",
                count(i64::try_from(ahead).unwrap_or(i64::MAX), "older invoice")
            ),
            None,
        ),
        Some(CustomerPlace::WaitsForRetry) => (
            Reason::WaitsForRetry,
            "a failed statement of this customer is retried once its backoff is over, and this invoice goes out with it".into(),
            None,
        ),
        _ => decision,
    }
}

/// Each step's date for an invoice due on `due_date`.
fn occurrences(stages: &Stages, due_date: NaiveDate) -> Vec<Occurrence> {
    stages
        .steps()
        .iter()
        .map(|step| Occurrence {
            name: step.key.clone(),
            stage: stages.stage(step).name.clone(),
            date: stages.date_of(step, due_date),
        })
        .collect()
}

fn not_in_source(rows: &[ReminderView]) -> String {
    if rows.is_empty() {
        "source.relation has no row with this invoice_id, and it has no reminder rows".into()
    } else {
        "source.relation has no row with this invoice_id (any more): nothing more is sent; its reminder rows are history".into()
    }
}

/// An instant as sentences show it (RFC 3339, UTC, seconds).
pub fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

mod day;
use day::Day;
#[cfg(test)]
mod pause_tests;
#[cfg(test)]
mod tests;
