//! What `explain` reports about one invoice: the [`Explained`] object
//! (the JSON of `explain --json`, field names a contract), its
//! [`Reason`] (a stable label), and the views of the source row and the
//! reminder rows it shows.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Serialize, Serializer};

use crate::db::explain::{ReminderFacts, SourceFacts};
use crate::domain::{InvoiceId, Problem, StepKey};

/// Why an invoice gets, or does not get, a reminder today: the first that
/// applies, in this order. Serialized as the JSON `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The source has no usable row for the key ([`Unusable`]).
    SourceProblem,
    Paid,
    /// The pause flag, or `paused_until` today or later.
    Paused,
    /// Paused in the operator console (`console_pauses`): the invoice, or
    /// its customer.
    PausedInConsole,
    /// A payment signal holds it (`payment_holds`): paid, a payment on its
    /// way, or disputed, by the provider's word.
    HeldByPaymentSignal,
    /// Every recipient is on the suppression list (`suppress`, bounces):
    /// today's step was recorded `skipped`, or would be.
    Suppressed,
    /// Before the first step's date.
    NotDueUntil,
    /// Every step from today's due step on was sent or discarded.
    NoMoreSteps,
    /// Today's due step was sent.
    Sent,
    /// Today's due step was handed to SMTP and its result never came back.
    UnknownDelivery,
    /// Today's due step was discarded, or failed as often as allowed.
    AttemptsExhausted,
    /// A failed row of a step that is no longer due: the next tick
    /// discards it.
    Superseded,
    /// Today's due step failed; its retry waits for the backoff.
    BackoffUntil,
    /// A reminder within `reminders.min_days_between` days.
    MinGapUntil,
    /// Customer mode: the customer's next statement is full
    /// (`max_invoices_per_mail`); this invoice goes in a later one today.
    LaterStatement,
    /// Customer mode: a failed statement of the customer waits for its
    /// backoff, and everything new goes out with it.
    WaitsForRetry,
    /// Today's due step claims late-payment interest, and the rates file
    /// has no rate for today's half-year: it waits; other steps go.
    RatesOutOfDate,
    /// It would go today, and its customer's send window is closed now.
    WaitingForSendWindow,
    WillSendToday,
}

impl Reason {
    /// The JSON `reason`.
    pub fn label(self) -> &'static str {
        match self {
            Self::SourceProblem => "source_problem",
            Self::Paid => "paid",
            Self::Paused => "paused",
            Self::PausedInConsole => "paused_in_console",
            Self::HeldByPaymentSignal => "held_by_payment_signal",
            Self::Suppressed => "suppressed",
            Self::NotDueUntil => "not_due_until",
            Self::NoMoreSteps => "no_more_steps",
            Self::Sent => "sent",
            Self::UnknownDelivery => "unknown_delivery",
            Self::AttemptsExhausted => "attempts_exhausted",
            Self::Superseded => "superseded",
            Self::BackoffUntil => "backoff_until",
            Self::MinGapUntil => "min_gap_until",
            Self::LaterStatement => "later_statement",
            Self::WaitsForRetry => "waits_for_retry",
            Self::RatesOutOfDate => "rates_out_of_date",
            Self::WaitingForSendWindow => "waiting_for_send_window",
            Self::WillSendToday => "will_send_today",
        }
    }
}

/// When a wait ends: a date (paused, not due, the gap) or, for a retry's
/// backoff, an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Until {
    Date(NaiveDate),
    Time(DateTime<Utc>),
}

/// How far today is from the due date, in words: `due today`, `due in
/// 2 days`, `1 day overdue`.
pub fn due_in_words(days_overdue: i64) -> String {
    match days_overdue {
        0 => "due today".to_owned(),
        d if d < 0 => format!("due in {}", count(d.saturating_neg(), "day")),
        d => format!("{} overdue", count(d, "day")),
    }
}

/// `n` of `what`, singular or plural: `1 day`, `3 days`, `0 attempts`.
pub fn count(n: impl Into<i64>, what: &str) -> String {
    match n.into() {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// How often something happened: `once`, `twice`, `3 times`.
pub fn times(n: impl Into<i64>) -> String {
    match n.into() {
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    }
}

/// Why the source has no row a reminder can be made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No row of the source carries the key.
    NotInSource,
    /// The row check's problem (`repeated_key` for several rows).
    Row(Problem),
}

impl Unusable {
    pub fn label(self) -> &'static str {
        match self {
            Self::NotInSource => "not_in_source",
            Self::Row(problem) => problem.label(),
        }
    }
}

impl Serialize for Unusable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

/// Where a reminder row stands, from its status, its start and its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    /// `sending`, not started, its run still working: about to be sent.
    Claimed,
    /// `sending`, not started, its run over: the next tick returns it (a
    /// first claim is deleted, a retry goes back to `failed`).
    Returning,
    /// `sending`, started, its run still working: being sent now.
    InFlight,
    /// `sending`, started, its run over: delivery unknown.
    Unknown,
    Sent,
    Failed,
    Discarded,
    /// Not sent, on purpose: `last_error` says why (`suppressed`).
    Skipped,
}

impl RowState {
    pub fn of(row: &ReminderFacts) -> Self {
        match (row.status.as_str(), row.started_at.is_some(), row.run_ended) {
            ("sent", _, _) => Self::Sent,
            ("failed", _, _) => Self::Failed,
            ("skipped", _, _) => Self::Skipped,
            ("sending", false, false) => Self::Claimed,
            ("sending", false, true) => Self::Returning,
            ("sending", true, false) => Self::InFlight,
            ("sending", true, true) => Self::Unknown,
            _ => Self::Discarded,
        }
    }
}

/// The source row, as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceView {
    pub invoice_id: Option<InvoiceId>,
    pub invoice_number: Option<String>,
    pub customer_name: Option<String>,
    pub email: Option<String>,
    pub locale: Option<String>,
    pub amount_minor: Option<i64>,
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub due_date: Option<NaiveDate>,
    pub is_paid: Option<bool>,
    pub paused: Option<bool>,
    pub paused_until: Option<NaiveDate>,
    pub payment_url: Option<String>,
}

impl From<&SourceFacts> for SourceView {
    fn from(s: &SourceFacts) -> Self {
        let r = &s.row;
        Self {
            invoice_id: r.invoice_id.clone(),
            invoice_number: r.number.clone(),
            customer_name: r.customer_name.clone(),
            email: r.customer_email.clone(),
            locale: r.customer_locale.clone(),
            amount_minor: r.amount_minor,
            amount: r.amount_major.clone(),
            currency: r.currency.clone(),
            due_date: r.due_date,
            is_paid: s.is_paid,
            paused: s.paused,
            paused_until: s.paused_until,
            payment_url: r.payment_url.clone(),
        }
    }
}

/// One occurrence of a stage for this invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Occurrence {
    /// The step key (`final-2`).
    pub name: StepKey,
    /// The stage it is an occurrence of (`final`).
    pub stage: String,
    pub date: NaiveDate,
}

/// A reminder row and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReminderView {
    #[serde(flatten)]
    pub row: ReminderFacts,
    pub state: RowState,
}

/// What a payment object's hold state means, in words.
pub fn hold_state_words(state: &str) -> &'static str {
    match state {
        "paid" => "holds until the source says paid",
        "pending" => "a payment on its way: holds until payments.pending_hold after it",
        "disputed" => "holds until the dispute closes",
        "lost" => "a dispute lost: holds until an operator lifts it",
        "settled" => {
            "a payment arrived toward the Stripe invoice (perhaps part of it): holds nothing by itself"
        }
        "released" => "ended by a failed payment or a release: holds nothing",
        "lifted" => "lifted in the console: holds nothing",
        "booked" => "ended: the source said paid, so a reopened invoice is reminded again",
        _ => "",
    }
}

/// The payment hold in force on an invoice (`explain --json`'s
/// `payment_hold`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HoldInForce {
    /// `paid`, `pending` or `disputed`.
    pub state: &'static str,
    /// How a dispute ended while it still holds: `lost` (held until an
    /// operator lifts it); None for an open dispute or another state.
    pub dispute: Option<&'static str>,
    pub provider: String,
    /// The payment object whose hold it is ('' for the generic signal).
    pub object_id: String,
    pub event_id: String,
    pub event_at: chrono::DateTime<chrono::Utc>,
    /// A pending hold's end.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl HoldInForce {
    /// The strongest of `holds` in force, if any holds.
    pub fn of(holds: &[crate::db::payments::PaymentHold]) -> Option<Self> {
        let h = holds
            .iter()
            .filter(|h| h.active)
            .max_by_key(|h| h.strength())?;
        let (state, dispute) = match h.state.as_str() {
            "paid" => ("paid", None),
            "pending" => ("pending", None),
            "lost" => ("disputed", Some("lost")),
            _ => ("disputed", None),
        };
        Some(Self {
            state,
            dispute,
            provider: h.provider.clone(),
            object_id: h.object_id.clone(),
            event_id: h.event_id.clone(),
            event_at: h.event_at,
            expires_at: h.expires_at,
        })
    }
}

/// Everything `explain` says about one invoice (the JSON object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explained {
    pub invoice_id: InvoiceId,
    /// The database's date in `timezone`, which everything is decided for.
    pub today: NaiveDate,
    /// The zone the decision used: the customer's own (the source's
    /// `timezone`), else `send_window.timezone`, else `schedule.timezone`.
    pub timezone: String,
    /// The holiday calendar the decision used: the customer's own (the
    /// source's `holiday_calendar`), else `send_window.calendar`; None:
    /// none.
    pub calendar: Option<String>,
    pub reason: Reason,
    /// The reason as a sentence.
    pub reason_detail: String,
    pub until: Option<Until>,
    pub next_step: Option<StepKey>,
    pub next_date: Option<NaiveDate>,
    /// The one source row (None when there is none, or several).
    pub source: Option<SourceView>,
    /// How many rows of the source carry the key.
    pub source_rows: i64,
    pub source_problem: Option<Unusable>,
    /// `is_paid`, NULL counting as paid.
    pub paid: Option<bool>,
    /// The pause flag, NULL counting as not paused.
    pub paused: Option<bool>,
    pub paused_until: Option<NaiveDate>,
    /// The console pause that keeps it back, if any.
    pub console_pause: Option<crate::db::pauses::ConsolePause>,
    /// The payment hold in force, if any: the strongest when several of
    /// its payment objects hold it.
    pub payment_hold: Option<HoldInForce>,
    /// Every payment object's hold, in force or not (a failed payment's,
    /// a partial payment's, one the books ended), oldest event first.
    pub payment_holds: Vec<crate::db::payments::PaymentHold>,
    pub due_date: Option<NaiveDate>,
    /// Days from the due date to today (negative: not yet due).
    pub days_overdue: Option<i64>,
    pub due_step_today: Option<StepKey>,
    pub stages: Vec<Occurrence>,
    pub reminders: Vec<ReminderView>,
    /// The invoice's recipients that are on the suppression list.
    pub suppressed: Vec<crate::db::suppressions::Suppression>,
    /// The late-payment claim today's due step states, if it states one
    /// (null under regime `none`). Nothing is written anywhere.
    pub late_payment: Option<crate::late_payment::Claim>,
    /// Its working in words, a line each (the text form and the console).
    #[serde(skip)]
    pub late_payment_working: Vec<String>,
    /// Why the send window is closed (`day`, `hours`), when it waits for it.
    pub window_closed_because: Option<&'static str>,
    /// When the window opens (RFC 3339, the customer's offset), when it
    /// waits for it.
    pub window_opens: Option<String>,
}

impl Explained {
    /// The source has a row for the key, or the invoice has reminder rows
    /// (`explain` exits 0); otherwise nothing is known of it (exit 1).
    pub fn is_known(&self) -> bool {
        self.source_rows > 0 || !self.reminders.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_from_the_due_date_read_as_plain_words() {
        assert_eq!(due_in_words(-2), "due in 2 days");
        assert_eq!(due_in_words(-1), "due in 1 day");
        assert_eq!(due_in_words(0), "due today");
        assert_eq!(due_in_words(1), "1 day overdue");
        assert_eq!(due_in_words(3), "3 days overdue");
        assert_eq!(due_in_words(i64::MIN), format!("due in {} days", i64::MAX));
        assert_eq!(count(0, "attempt"), "0 attempts");
        assert_eq!(times(1), "once");
        assert_eq!(times(2), "twice");
        assert_eq!(times(5), "5 times");
    }
}
