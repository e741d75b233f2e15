//! One source row as it is read: every column of the source contract,
//! NULLs kept ([`SourceRow`]), and the one place its values are parsed into
//! an invoice and a customer, or into the first problem that keeps it from
//! being reminded. Every statement that reads source rows selects
//! [`source_columns!`].

use chrono::NaiveDate;
use chrono_tz::Tz;
use sqlx::FromRow;

use crate::config::Calendars;
use crate::domain::{
    Currency, Customer, Invoice, InvoiceId, Money, Problem, Recipients, Regime, SourceProblem,
};

/// The source's columns as [`SourceRow`] reads them, from the row `s`, as
/// they are: text columns cast (a view may expose varchar or an integer
/// invoice number), NULLs kept, so a broken row is seen as broken.
macro_rules! source_columns {
    () => {
        concat!(
            "s.invoice_id::text AS invoice_id,",
            " s.invoice_number::text AS number,",
            " {amount},",
            " s.currency::text AS currency,",
            " ",
            $crate::db::owing::date_value!("s.due_date"),
            " AS due_date,",
            " CASE WHEN NOT (",
            $crate::db::owing::sane_date!("s.due_date"),
            ") THEN s.due_date::text END AS due_date_bad,",
            " NULLIF(s.payment_url::text, '') AS payment_url,",
            " s.customer_name::text AS customer_name,",
            " s.email::text AS customer_email,",
            " NULLIF(s.locale::text, '') AS customer_locale,",
            " {customer} AS customer_id,",
            " {regime} AS late_payment_regime,",
            " {timezone} AS timezone,",
            " {holiday_calendar} AS holiday_calendar"
        )
    };
}
pub(crate) use source_columns;

/// One source row, as [`source_columns!`] selects it: untrusted, any
/// column may be NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq, FromRow)]
pub struct SourceRow {
    pub invoice_id: Option<InvoiceId>,
    pub number: Option<String>,
    pub amount_minor: Option<i64>,
    pub amount_major: Option<String>,
    pub currency: Option<String>,
    pub due_date: Option<NaiveDate>,
    /// A due date no reminder can be dated from (`infinity`, `-infinity`,
    /// a year past 262142), as the source has it; `due_date` is then None.
    pub due_date_bad: Option<String>,
    pub payment_url: Option<String>,
    pub customer_name: Option<String>,
    pub customer_email: Option<String>,
    pub customer_locale: Option<String>,
    /// The source's `customer_id` in customer mode; None in invoice mode.
    pub customer_id: Option<String>,
    /// The source's `late_payment_regime`, when it has the column.
    pub late_payment_regime: Option<String>,
    /// The source's `timezone` (None: NULL, empty, or no such column).
    pub timezone: Option<String>,
    /// The source's `holiday_calendar` (None: NULL, empty, or no such
    /// column).
    pub holiday_calendar: Option<String>,
}

impl SourceRow {
    /// The row names a holiday calendar that is neither built in nor a
    /// file of `send_window.calendars_dir`: reported, and the row is still
    /// reminded, by the window's days and hours alone.
    pub fn calendar_problem(&self, calendars: &Calendars) -> Option<SourceProblem> {
        let name = self.holiday_calendar.as_deref()?.trim();
        (!name.is_empty() && calendars.get(name).is_none()).then(|| {
            self.problem(
                Problem::UnknownCalendar,
                format!("holiday_calendar {name:?} is neither a built-in calendar nor a file of send_window.calendars_dir"),
            )
        })
    }

    /// The problem `problem` of this row, with `detail`.
    pub fn problem(&self, problem: Problem, detail: impl Into<String>) -> SourceProblem {
        SourceProblem {
            invoice_id: self.invoice_id.clone(),
            invoice_number: self.number.clone(),
            problem,
            detail: detail.into(),
        }
    }

    /// The invoice and customer of a row that can make a reminder, its
    /// values parsed into their domain types here, once; otherwise the
    /// first problem that keeps it from being reminded: a NULL key, a NULL
    /// among the columns a reminder needs (an email, a due date, a
    /// currency and an amount), a due date no step can be dated from, a
    /// currency that is not ISO 4217, an amount that does not fit its
    /// currency, an `email` cell without a valid address list.
    pub fn into_parts(self) -> Result<(Invoice, Customer), SourceProblem> {
        let missing = |row: &Self, column: &str| {
            row.problem(Problem::MissingField, format!("{column} is NULL"))
        };
        let Some(id) = self.invoice_id.clone() else {
            return Err(self.problem(Problem::NullKey, "invoice_id is NULL"));
        };
        let Some(email) = self.customer_email.as_deref() else {
            return Err(missing(&self, "email"));
        };
        if let Some(bad) = &self.due_date_bad {
            return Err(self.problem(
                Problem::BadDueDate,
                format!("due_date is {bad}: no step can be dated from it"),
            ));
        }
        let Some(due_date) = self.due_date else {
            return Err(missing(&self, "due_date"));
        };
        let Some(currency) = self.currency.as_deref() else {
            return Err(missing(&self, "currency"));
        };
        if self.amount_minor.is_none() && self.amount_major.is_none() {
            return Err(missing(&self, "the amount"));
        }
        let currency =
            Currency::parse(currency).map_err(|e| self.problem(Problem::BadCurrency, e))?;
        let amount = match (&self.amount_major, self.amount_minor) {
            (Some(major), _) => Money::from_major(major, currency)
                .map_err(|e| self.problem(Problem::BadAmount, e))?,
            (None, minor) => Money::from_minor(minor.unwrap_or_default(), currency),
        };
        let email = Recipients::parse(email).map_err(|e| self.problem(Problem::BadAddress, e))?;
        let late_payment_regime = match self.late_payment_regime.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(name) => Some(
                name.parse::<Regime>()
                    .map_err(|e| self.problem(Problem::UnknownLatePaymentRegime, e))?,
            ),
        };
        let timezone = match self.timezone.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(name) => match name.parse::<Tz>() {
                Ok(zone) if crate::db::zones::knows(name) => Some(zone),
                _ => {
                    return Err(self.problem(
                        Problem::BadTimezone,
                        format!("timezone {name:?} is not a zone both the database and the worker know (an IANA name such as \"Europe/Berlin\")"),
                    ));
                }
            },
        };
        Ok((
            Invoice {
                id,
                number: self.number.unwrap_or_default(),
                amount,
                due_date,
                payment_url: self.payment_url,
                late_payment_regime,
            },
            Customer {
                name: self.customer_name.unwrap_or_default(),
                email,
                locale: self.customer_locale,
                id: self.customer_id,
                timezone,
                holiday_calendar: self.holiday_calendar,
            },
        ))
    }
}
