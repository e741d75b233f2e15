//! The decision behind `explain`, as pure functions over what the database
//! said about one invoice ([`Facts`]): one [`Reason`] for what happens to
//! it today, the first that applies in a fixed order, and the step and
//! date it will next be reminded on if nothing changes but the date.
//!
//! It follows the tick, not a description of it: the due step is
//! `Stages::due_step`, a row's fitness is `problems::check`, and the paid
//! and paused test, a run being over and the retry wait come from the
//! claim's own SQL fragments (`db::explain`). What is decided here is only
//! which of those facts speaks first, and, for the dates to come, where
//! each wait ends: `paused_until` the day after it, the gap
//! `min_days_between` days after the last reminder's `created_at` date, a
//! retry on its backoff's date, each step within its own date range.

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use super::report::{
    Explained, Occurrence, Reason, ReminderView, RowState, SourceView, Until, Unusable, count,
    times,
};
use crate::db::explain::{ReminderFacts, SourceFacts};
use crate::domain::{InvoiceId, Problem, SkipReason};
use crate::problems;
use crate::stages::{Stages, Step, shift};

/// What the configuration says about reminders, as the tick uses it.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub stages: &'a Stages,
    pub min_days_between: u32,
    pub max_attempts: u32,
}

/// What the database said about one invoice.
#[derive(Debug, Clone)]
pub struct Facts {
    pub invoice_id: InvoiceId,
    /// The database's date in `timezone`.
    pub today: NaiveDate,
    /// `schedule.timezone`.
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

/// One invoice's facts, read for one day.
struct Day<'a> {
    rules: Rules<'a>,
    today: NaiveDate,
    due_date: NaiveDate,
    source: &'a SourceFacts,
    rows: &'a [ReminderView],
    customer_last: Option<NaiveDate>,
}

/// A reason with its sentence and, for a wait, when it ends.
type Verdict = (Reason, String, Option<Until>);

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
    } = facts;
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
    let due_step = due_date.and_then(|d| {
        rules
            .stages
            .due_step(today.signed_duration_since(d).num_days())
    });
    let mut explained = Explained {
        invoice_id,
        today,
        timezone,
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
        due_date,
        days_overdue: due_date.map(|d| today.signed_duration_since(d).num_days()),
        due_step_today: due_step.map(|s| s.key.clone()),
        stages: due_date.map_or_else(Vec::new, |d| occurrences(rules.stages, d)),
        reminders: Vec::new(),
        suppressed,
    };
    let unusable = match one {
        None if copies == 0 => Some((Unusable::NotInSource, not_in_source(&rows))),
        None => Some((
            Unusable::Row(Problem::RepeatedKey),
            format!(
                "{copies} rows of the source have this invoice_id; no reminder is sent until there is one"
            ),
        )),
        Some(s) => problems::check(s.row.clone()).err().map(|p| {
            (
                Unusable::Row(p.problem),
                format!(
                    "{}: {}; no reminder is sent until the row is fixed",
                    p.problem, p.detail
                ),
            )
        }),
    };
    let verdict = match (unusable, one, due_date) {
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
            };
            let verdict = day.verdict(due_step);
            if let Some((step, date)) = day.next_reminder() {
                explained.next_step = Some(step.key.clone());
                explained.next_date = Some(date);
            }
            verdict
        }
        // `problems::check` passed: one row, with a due date.
        (None, _, _) => (
            Reason::SourceProblem,
            "the source row has no due date".into(),
            None,
        ),
    };
    let verdict = suppressed_verdict(verdict, all_suppressed, due_step, &rows);
    let verdict = customer_verdict(verdict, customer_place);
    (explained.reason, explained.reason_detail, explained.until) = verdict;
    explained.reminders = rows;
    explained
}

/// `suppressed` comes right after `paused`: today's due step was recorded
/// `skipped` (every recipient suppressed when it was claimed), or every
/// recipient is suppressed now and the verdict was that something would be
/// sent (today, after a backoff or after the gap).
fn suppressed_verdict(
    verdict: Verdict,
    all_suppressed: bool,
    due_step: Option<&crate::stages::Step>,
    rows: &[ReminderView],
) -> Verdict {
    let skipped_today = due_step.is_some_and(|step| {
        rows.iter().any(|r| {
            r.row.step == step.key
                && r.state == RowState::Skipped
                && r.row.last_error.as_deref() == Some(SkipReason::Suppressed.label())
        })
    });
    let would_send = matches!(
        verdict.0,
        Reason::WillSendToday | Reason::BackoffUntil | Reason::MinGapUntil
    );
    match verdict.0 {
        Reason::SourceProblem | Reason::Paid | Reason::Paused => verdict,
        _ if skipped_today || (all_suppressed && would_send) => (
            Reason::Suppressed,
            "every recipient is on the suppression list (`suppress list`): no reminder goes to this invoice until one is removed".into(),
            None,
        ),
        _ => verdict,
    }
}

/// Customer mode: an invoice the tick would claim today goes in the next
/// statement only if its customer's choice puts it there.
fn customer_verdict(verdict: Verdict, place: Option<CustomerPlace>) -> Verdict {
    if verdict.0 != Reason::WillSendToday {
        return verdict;
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
        _ => verdict,
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
            date: shift(due_date, step.offset),
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

impl Day<'_> {
    fn row(&self, key: &str) -> Option<&ReminderView> {
        self.rows.iter().find(|r| r.row.step == key)
    }

    /// A `failed` row, or one the next tick turns back into `failed` (a
    /// retry claimed by a run that ended before starting it).
    fn retried(row: &ReminderView) -> bool {
        row.state == RowState::Failed || (row.state == RowState::Returning && row.row.attempts > 0)
    }

    fn exhausted(&self, row: &ReminderView) -> bool {
        Self::retried(row) && i64::from(row.row.attempts) >= i64::from(self.rules.max_attempts)
    }

    /// The first day the `min_days_between` gap allows a claim, counting
    /// the rows `sent` or `sending` (but not those the next tick returns)
    /// of every step but `except`; None: no gap.
    fn gap_ends(&self, except: Option<&str>) -> Option<(NaiveDate, NaiveDate)> {
        if self.rules.min_days_between == 0 {
            return None;
        }
        let last = self
            .rows
            .iter()
            .filter(|r| Some(r.row.step.as_str()) != except)
            .filter(|r| {
                matches!(
                    r.state,
                    RowState::Sent | RowState::Claimed | RowState::InFlight | RowState::Unknown
                )
            })
            .map(|r| r.row.claimed_on)
            .chain(self.customer_last)
            .max()?;
        Some((last, shift(last, i64::from(self.rules.min_days_between))))
    }

    /// The first day `paused_until` allows a claim, if it is today or later.
    fn pause_ends(&self) -> Option<NaiveDate> {
        self.source
            .paused_until
            .filter(|d| *d >= self.today)
            .map(|d| shift(d, 1))
    }

    /// The date range of step `j` (its last day: None for the last step).
    fn range(&self, j: usize) -> Option<(&Step, NaiveDate, Option<NaiveDate>)> {
        let steps = self.rules.stages.steps();
        let step = steps.get(j)?;
        let last = steps
            .get(j.saturating_add(1))
            .map(|next| shift(self.due_date, next.offset.saturating_sub(1)));
        Some((step, shift(self.due_date, step.offset), last))
    }

    fn verdict(&self, due: Option<&Step>) -> Verdict {
        let s = self.source;
        if !s.flags_owe {
            if s.is_paid != Some(false) {
                let how = if s.is_paid.is_none() {
                    "is_paid is NULL, which counts as paid"
                } else {
                    "is_paid is true"
                };
                return (Reason::Paid, format!("{how}: no reminder is sent"), None);
            }
            return match s.paused_until.filter(|_| s.paused != Some(true)) {
                Some(until) => (
                    Reason::Paused,
                    format!("paused_until is {until}: no reminder up to and including that day"),
                    Some(Until::Date(until)),
                ),
                None => (
                    Reason::Paused,
                    "paused is true: no reminder until it is cleared".into(),
                    None,
                ),
            };
        }
        let Some(due) = due else {
            return match self.range(0) {
                Some((first, date, _)) => (
                    Reason::NotDueUntil,
                    format!(
                        "no step is due yet: the first, {}, falls on {date}, {}",
                        first.key,
                        in_days(date.signed_duration_since(self.today).num_days())
                    ),
                    Some(Until::Date(date)),
                ),
                None => (Reason::NotDueUntil, "there are no stages".into(), None),
            };
        };
        self.verdict_for_step(due)
    }

    /// The verdict once `due` is today's due step.
    fn verdict_for_step(&self, due: &Step) -> Verdict {
        let steps = self.rules.stages.steps();
        let index = steps.iter().position(|s| s.key == due.key).unwrap_or(0);
        let done = |s: &Step| {
            self.row(&s.key).is_some_and(|r| {
                matches!(
                    r.state,
                    RowState::Sent | RowState::Discarded | RowState::Skipped
                )
            })
        };
        if steps.get(index..).is_some_and(|rest| rest.iter().all(done)) {
            let last = steps.last().map_or("", |s| s.key.as_str());
            return (
                Reason::NoMoreSteps,
                format!(
                    "every step from {} to {last} was sent or discarded: nothing more is sent",
                    due.key
                ),
                None,
            );
        }
        let row = self.row(&due.key);
        let key = &due.key;
        if let Some(r) = row {
            let run = run_of(&r.row);
            match r.state {
                RowState::Skipped
                    if r.row
                        .last_error
                        .as_deref()
                        .is_some_and(|e| e.starts_with("superseded")) =>
                {
                    return (
                        Reason::Superseded,
                        format!(
                            "today's due step {key} was recorded skipped: {}",
                            r.row.last_error.as_deref().unwrap_or_default()
                        ),
                        None,
                    );
                }
                RowState::Sent => {
                    let when = r
                        .row
                        .sent_at
                        .map(|t| format!(" at {}", instant(t)))
                        .unwrap_or_default();
                    return (
                        Reason::Sent,
                        format!("today's due step {key} was sent{when}"),
                        None,
                    );
                }
                RowState::Unknown => {
                    return (
                        Reason::UnknownDelivery,
                        format!(
                            "today's due step {key} was handed to the mail server by {run} and no result came back: it is never resent by itself; look its Message-ID up in the server's log, then `invoice-reminder resolve --sent {id}` (it went out) or `--resend {id}`",
                            id = r.row.id
                        ),
                        None,
                    );
                }
                RowState::Discarded => {
                    return (
                        Reason::AttemptsExhausted,
                        format!(
                            "today's due step {key} was discarded after {}: {}",
                            count(r.row.attempts, "attempt"),
                            r.row.last_error.as_deref().unwrap_or("no error recorded")
                        ),
                        None,
                    );
                }
                _ if self.exhausted(r) => {
                    return (
                        Reason::AttemptsExhausted,
                        format!(
                            "today's due step {key} failed {}, reminders.max_attempts = {}: the next tick discards it (last error: {})",
                            times(r.row.attempts),
                            self.rules.max_attempts,
                            r.row.last_error.as_deref().unwrap_or("none recorded")
                        ),
                        None,
                    );
                }
                _ => {}
            }
        }
        if let Some(stale) = self
            .rows
            .iter()
            .find(|r| r.row.step != *key && Self::retried(r))
        {
            return (
                Reason::Superseded,
                format!(
                    "the failed reminder for {} is not retried: today's due step is {key}, so the next tick discards it (\"superseded by {key}\")",
                    stale.row.step
                ),
                None,
            );
        }
        if let Some(r) = row.filter(|r| Self::retried(r) && !r.row.backoff_over) {
            let retry = r.row.retry_at.map(Until::Time);
            let at = r.row.retry_at.map(instant).unwrap_or_default();
            return (
                Reason::BackoffUntil,
                format!(
                    "today's due step {key} failed (attempt {} of {}): it is retried after {at} (reminders.retry_backoff, doubling per attempt up to retry_backoff_max)",
                    r.row.attempts, self.rules.max_attempts
                ),
                retry,
            );
        }
        if let Some((last, ends)) = self
            .gap_ends(Some(key))
            .filter(|(_, ends)| *ends > self.today)
        {
            return (
                Reason::MinGapUntil,
                format!(
                    "a reminder was sent (or is being sent) on {last} and reminders.min_days_between = {}: no step is claimed before {ends}, {}",
                    self.rules.min_days_between,
                    in_days(ends.signed_duration_since(self.today).num_days())
                ),
                Some(Until::Date(ends)),
            );
        }
        let detail = match row {
            Some(r) if matches!(r.state, RowState::Claimed | RowState::InFlight) => {
                format!(
                    "today's due step {key} is being sent now by {}",
                    run_of(&r.row)
                )
            }
            Some(r) if Self::retried(r) => format!(
                "today's due step {key} failed {} and its backoff is over: the next tick retries it",
                times(r.row.attempts)
            ),
            Some(r) => format!(
                "today's due step {key} was claimed by {}, which ended before sending it: the next tick returns it and sends it",
                run_of(&r.row)
            ),
            None => format!(
                "today's due step {key} has no reminder yet: the next tick claims and sends it"
            ),
        };
        (Reason::WillSendToday, detail, None)
    }

    /// The step and the day this invoice is next claimed on, if nothing
    /// changes but the date: each step in turn, within its own range, on
    /// the first day every wait (today, the pause, the gap, the row's own
    /// retry) has ended. A step already sent, discarded, out of attempts or
    /// of unknown delivery is never claimed again.
    fn next_reminder(&self) -> Option<(&Step, NaiveDate)> {
        let s = self.source;
        if s.is_paid != Some(false) || s.paused == Some(true) {
            return None;
        }
        let waits = [self.pause_ends(), self.gap_ends(None).map(|(_, ends)| ends)];
        let common = waits.into_iter().flatten().fold(self.today, NaiveDate::max);
        let age = self.today.signed_duration_since(self.due_date).num_days();
        let due_today = self.rules.stages.due_step(age).is_some();
        for j in 0..self.rules.stages.steps().len() {
            let Some((step, first, last)) = self.range(j) else {
                break;
            };
            if last.is_some_and(|last| last < self.today) {
                continue;
            }
            let row_from = match self.row(&step.key) {
                None => self.today,
                Some(r) => match r.state {
                    RowState::Claimed | RowState::InFlight => return Some((step, self.today)),
                    RowState::Returning if r.row.attempts == 0 => self.today,
                    _ if self.exhausted(r) => continue,
                    // A failed row of a step that is not due today: the
                    // next tick discards it (superseded), so the step is
                    // never claimed again.
                    _ if Self::retried(r) && first > self.today && due_today => continue,
                    _ if Self::retried(r) && r.row.backoff_over => self.today,
                    _ if Self::retried(r) => r.row.retry_on.unwrap_or(self.today),
                    _ => continue,
                },
            };
            let start = first.max(common).max(row_from);
            if last.is_none_or(|last| start <= last) {
                return Some((step, start));
            }
        }
        None
    }
}

/// A day `days` from today, in words: `tomorrow`, `in 3 days`.
fn in_days(days: i64) -> String {
    match days {
        1 => "tomorrow".to_owned(),
        d if d <= 0 => "today".to_owned(),
        d => format!("in {}", count(d, "day")),
    }
}

/// An instant as sentences show it (RFC 3339, UTC, seconds).
pub fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// "run 7 (worker-1)", for sentences.
fn run_of(row: &ReminderFacts) -> String {
    match (row.run_id, &row.replica) {
        (Some(id), Some(replica)) => format!("run {id} ({replica})"),
        (Some(id), None) => format!("run {id}"),
        (None, _) => "a run no longer recorded".into(),
    }
}

#[cfg(test)]
mod tests;
