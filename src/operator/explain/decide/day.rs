//! One invoice's facts, read for one day: the decision for today's due step
//! and the day of the next reminder if nothing changes but the date.

use chrono::NaiveDate;

use super::{Decision, Rules, instant};
use crate::db::explain::{ReminderFacts, SourceFacts};
use crate::db::pauses::ConsolePause;
use crate::domain::StepKey;
use crate::operator::explain::report::HoldInForce;
use crate::operator::explain::report::{Reason, ReminderView, RowState, Until, count, times};
use crate::stages::{Step, shift};

/// One invoice's facts, read for one day.
pub(super) struct Day<'a> {
    pub(super) rules: Rules<'a>,
    pub(super) today: NaiveDate,
    pub(super) due_date: NaiveDate,
    pub(super) source: &'a SourceFacts,
    pub(super) rows: &'a [ReminderView],
    pub(super) customer_last: Option<NaiveDate>,
    pub(super) console_pause: Option<&'a ConsolePause>,
    pub(super) payment_hold: Option<&'a HoldInForce>,
}

impl Day<'_> {
    fn row(&self, key: &StepKey) -> Option<&ReminderView> {
        self.rows.iter().find(|r| &r.row.step == key)
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
    fn gap_ends(&self, except: Option<&StepKey>) -> Option<(NaiveDate, NaiveDate)> {
        if self.rules.min_days_between == 0 {
            return None;
        }
        let last = self
            .rows
            .iter()
            .filter(|r| Some(&r.row.step) != except)
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
        let stages = &self.rules.stages;
        let steps = stages.steps();
        let step = steps.get(j)?;
        let last = steps
            .get(j.saturating_add(1))
            .map(|next| shift(stages.date_of(next, self.due_date), -1));
        Some((step, stages.date_of(step, self.due_date), last))
    }

    pub(super) fn decision(&self, due: Option<&Step>) -> Decision {
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
            if let Some(h) = self.payment_hold {
                let until = match (h.expires_at, h.state, h.dispute) {
                    (Some(end), ..) => {
                        format!("until {} unless the source says paid first", instant(end))
                    }
                    (None, "paid", _) => {
                        "until the source says paid or an operator lifts it".to_owned()
                    }
                    (None, _, Some(end)) => {
                        format!("until an operator lifts it (the dispute was {end})")
                    }
                    (None, ..) => "until the dispute closes or an operator lifts it".to_owned(),
                };
                let object = if h.object_id.is_empty() {
                    String::new()
                } else {
                    format!(" for {}", h.object_id)
                };
                return (
                    Reason::HeldByPaymentSignal,
                    format!(
                        "held by a payment signal: {} event {}{object} ({}) at {}: no reminder {until}",
                        h.provider,
                        h.event_id,
                        h.dispute.unwrap_or(h.state),
                        instant(h.event_at)
                    ),
                    None,
                );
            }
            if let Some(p) = self.console_pause {
                let what = match &p.customer_id {
                    Some(customer) => format!("its customer {customer} was"),
                    None => "it was".to_owned(),
                };
                return (
                    Reason::PausedInConsole,
                    format!(
                        "{what} paused in the console by {} at {} ({}): no reminder until an operator unpauses it",
                        p.paused_by,
                        instant(p.paused_at),
                        p.reason
                    ),
                    None,
                );
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
        self.decision_for_step(due)
    }

    /// The decision once `due` is today's due step.
    fn decision_for_step(&self, due: &Step) -> Decision {
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
                            "today's due step {key} was handed to the mail server by {run} and no result came back: it is never resent by itself; look its Message-ID up in the server's log, then `invoice-reminder settle --sent {id}` (it went out) or `--resend {id}`",
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
    pub(super) fn next_reminder(&self) -> Option<(&Step, NaiveDate)> {
        let s = self.source;
        if s.is_paid != Some(false)
            || s.paused == Some(true)
            || self.console_pause.is_some()
            || self.payment_hold.is_some()
        {
            return None;
        }
        let waits = [self.pause_ends(), self.gap_ends(None).map(|(_, ends)| ends)];
        let common = waits.into_iter().flatten().fold(self.today, NaiveDate::max);
        let due_today = self
            .rules
            .stages
            .due_step(self.due_date, self.today)
            .is_some();
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

/// "run 7 (worker-1)", for sentences.
fn run_of(row: &ReminderFacts) -> String {
    match (row.run_id, &row.replica) {
        (Some(id), Some(replica)) => format!("run {id} ({replica})"),
        (Some(id), None) => format!("run {id}"),
        (None, _) => "a run no longer recorded".into(),
    }
}
