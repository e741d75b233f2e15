//! Why a source row cannot make a reminder ([`Problem`]), and the row it
//! was found on ([`SourceProblem`]): the labels `audit`, `check-source`,
//! the tick summary and `invoice_reminder_source_problems_total` share.

use std::fmt;

use super::InvoiceId;

/// Why a source row cannot make a reminder. Such a row is skipped (never
/// claimed, never mailed) and reported under its [`Problem::label`]; the
/// other rows go on. One problem is reported and not skipped:
/// [`Problem::UnknownCalendar`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// The key is on more than one row: the rows may disagree (address,
    /// amount, currency), and which one to believe is not ours to guess.
    RepeatedKey,
    /// `invoice_id` is NULL: the row cannot be claimed.
    NullKey,
    /// `email`, `due_date`, `currency` or the amount is NULL.
    MissingField,
    /// `currency` is not an ISO 4217 code.
    BadCurrency,
    /// An address in `email` does not parse (or there is none).
    BadAddress,
    /// The amount does not fit the currency's minor units (out of range).
    BadAmount,
    /// `due_date` is `infinity`, `-infinity` or past the dates the worker
    /// can hold: no step can be dated from it.
    BadDueDate,
    /// `late_payment_regime` names no regime (docs/late-payment.md).
    UnknownLatePaymentRegime,
    /// `timezone` names a zone the database or the worker does not know.
    BadTimezone,
    /// `holiday_calendar` names neither a built-in calendar nor a file of
    /// `send_window.calendars_dir`: the row is still reminded, by the send
    /// window's days and hours alone.
    UnknownCalendar,
}

impl Problem {
    pub const ALL: [Problem; 10] = [
        Self::RepeatedKey,
        Self::NullKey,
        Self::MissingField,
        Self::BadCurrency,
        Self::BadAddress,
        Self::BadAmount,
        Self::BadDueDate,
        Self::UnknownLatePaymentRegime,
        Self::BadTimezone,
        Self::UnknownCalendar,
    ];

    /// The `problem` label of `invoice_reminder_source_problems_total`, as
    /// `audit` and `check-source` print it.
    pub fn label(self) -> &'static str {
        match self {
            Self::RepeatedKey => "repeated_key",
            Self::NullKey => "null_key",
            Self::MissingField => "missing_field",
            Self::BadCurrency => "bad_currency",
            Self::BadAddress => "bad_address",
            Self::BadAmount => "bad_amount",
            Self::BadDueDate => "bad_due_date",
            Self::UnknownLatePaymentRegime => "unknown_late_payment_regime",
            Self::BadTimezone => "bad_timezone",
            Self::UnknownCalendar => "unknown_calendar",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One source row that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SourceProblem {
    /// None for a NULL key.
    pub invoice_id: Option<InvoiceId>,
    /// The row's `invoice_number`, which names a row whose key is NULL.
    pub invoice_number: Option<String>,
    pub problem: Problem,
    /// What exactly is wrong ("email is NULL", "unknown currency \"XYZ\"").
    pub detail: String,
}

impl fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.invoice_id, &self.invoice_number) {
            (Some(id), _) => write!(f, "invoice {id}")?,
            (None, Some(number)) => write!(f, "invoice with a NULL key (number {number:?})")?,
            (None, None) => write!(f, "invoice with a NULL key and number")?,
        }
        write!(f, ": {} ({})", self.problem, self.detail)
    }
}
