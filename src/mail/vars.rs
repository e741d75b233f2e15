//! The variables a reminder template sees: `customer`, `invoice`, `stage`,
//! `company`, `today` and `locale` (the README's "Writing your reminders"
//! lists them; a docs test checks the list). Customer-supplied text is
//! sanitized here (control characters, length) before any template sees it.

use chrono::NaiveDate;
use serde::Serialize;

use super::late::LateVars;
use super::text::{MAX_NAME_CHARS, MAX_NUMBER_CHARS};
use crate::config::CompanySettings;
use crate::domain::StepKey;
use crate::domain::sanitize;
use crate::domain::{Currency, Customer, Invoice, InvoiceId, Money, Recipients};
use crate::stages::Step;

#[derive(Serialize)]
pub(super) struct Vars<'a> {
    pub(super) customer: CustomerVars<'a>,
    pub(super) invoice: InvoiceVars,
    pub(super) stage: StageVars<'a>,
    pub(super) company: CompanyVars<'a>,
    pub(super) today: String,
    /// The locale amounts and dates are formatted in.
    pub(super) locale: String,
    /// The late-payment claim (docs/late-payment.md); None: the stage
    /// claims none, or the invoice's regime is `none`.
    pub(super) late_payment: Option<LateVars>,
}

#[derive(Serialize)]
pub(super) struct CustomerVars<'a> {
    pub(super) name: String,
    pub(super) email: &'a str,
    pub(super) locale: Option<&'a str>,
}

#[derive(Serialize)]
pub(super) struct InvoiceVars {
    pub(super) id: String,
    pub(super) number: String,
    /// Minor units of `currency`; `{{ invoice.amount | money(invoice.currency) }}`.
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) due_date: String,
    /// Negative before the due date.
    pub(super) days_overdue: i64,
}

#[derive(Serialize)]
pub(super) struct StageVars<'a> {
    pub(super) name: &'a str,
    pub(super) key: &'a StepKey,
    pub(super) occurrence: u32,
}

#[derive(Serialize)]
pub(super) struct CompanyVars<'a> {
    pub(super) name: &'a str,
    pub(super) reply_to: String,
    pub(super) support_email: &'a str,
    pub(super) payment_url: String,
}

impl<'a> Vars<'a> {
    /// The context for one reminder. `locale` and `company.payment_url`
    /// start empty: the caller sets them (the locale follows the template
    /// chosen, and the link is checked first; see `links`).
    pub(super) fn new(
        invoice: &'a Invoice,
        customer: &'a Customer,
        step: &'a Step,
        stage_name: &'a str,
        company: &'a CompanySettings,
        today: NaiveDate,
    ) -> Self {
        Vars {
            customer: CustomerVars {
                name: sanitize(&customer.name, MAX_NAME_CHARS),
                email: customer.email.cell().trim(),
                locale: customer.locale.as_deref(),
            },
            invoice: InvoiceVars {
                id: invoice.id.to_string(),
                number: sanitize(&invoice.number, MAX_NUMBER_CHARS),
                amount: invoice.amount.minor(),
                currency: invoice.amount.currency().as_str().to_owned(),
                due_date: invoice.due_date.to_string(),
                days_overdue: (today - invoice.due_date).num_days(),
            },
            stage: StageVars {
                name: stage_name,
                key: &step.key,
                occurrence: step.occurrence,
            },
            company: CompanyVars {
                name: &company.name,
                reply_to: company
                    .reply_to
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default(),
                support_email: company.support_email.as_deref().unwrap_or_default(),
                payment_url: String::new(),
            },
            today: today.to_string(),
            locale: String::new(),
            late_payment: None,
        }
    }
}

/// The reminder templates are checked against (and the console's preview
/// shows; its values parse, the error is the reason one would not).
pub fn sample(today: NaiveDate) -> Result<(Invoice, Customer), String> {
    Ok((
        Invoice {
            id: InvoiceId("1".into()),
            number: "INV-0001".into(),
            amount: Money::from_minor(123_456, Currency::parse("EUR")?),
            due_date: today - chrono::Days::new(10),
            payment_url: None,
            late_payment_regime: None,
        },
        Customer {
            name: "Ada Lovelace".into(),
            email: Recipients::parse("ada@example.com")?,
            locale: None,
            id: None,
            timezone: None,
            holiday_calendar: None,
        },
    ))
}
