//! The late-payment part of a reminder (docs/late-payment.md): the claim a
//! stage with `late_payment = true` states, as the templates'
//! `late_payment` variable, and, with `letter = true`, the letter
//! `letter-<number>.pdf` that states the same figures. Both are written by
//! the same formatting functions from the same [`Claim`], so the mail and
//! the letter cannot disagree; the letter is part of the message, so the
//! row's SHA-256 and the archive keep it as sent.

use chrono::NaiveDate;
use serde::Serialize;

use super::format::Formats;
use super::pdf::{LetterPage, render};
use super::text::{Attachment, MAX_NAME_CHARS, MAX_NUMBER_CHARS};
use crate::config::{CompanySettings, LatePaymentSettings};
use crate::domain::{Customer, Invoice, Regime, sanitize};
use crate::late_payment::{Claim, Period, Rate, price};
use crate::stages::{Stage, shift};

/// The claim `stage` states for `invoice` sent on `today`: None when the
/// stage claims nothing or the invoice's regime is `none`.
pub(super) fn claim_of(
    late: &LatePaymentSettings,
    stage: &Stage,
    invoice: &Invoice,
    today: NaiveDate,
) -> Result<Option<Claim>, String> {
    if !stage.late_payment {
        return Ok(None);
    }
    let regime = invoice.late_payment_regime.unwrap_or(late.regime);
    let Some(law) = late.law(regime) else {
        return match regime {
            Regime::None => Ok(None),
            _ => Err(format!(
                "late_payment_regime \"{regime}\" needs [late_payment.custom] with a series"
            )),
        };
    };
    price(&law, &late.rates, &invoice.amount, invoice.due_date, today)
        .map(Some)
        .map_err(|e| format!("cannot price the late-payment claim: {e}"))
}

/// A claim to check the templates and the letter against at start-up:
/// 10 days at 10.15 % and 40.00 of compensation, whatever the rates hold.
pub(super) fn sample_claim(invoice: &Invoice, today: NaiveDate) -> Claim {
    let from = shift(today, -9);
    Claim {
        regime: Regime::Eu,
        days: 10,
        interest_minor: 278,
        compensation_minor: 4_000,
        total_minor: 4_278,
        periods: vec![Period {
            from: from.max(shift(invoice.due_date, 1)),
            to: today,
            days: 10,
            rate_percent: Rate(101_500),
            interest_minor: 278,
        }],
    }
}

/// The templates' `late_payment`: amounts in minor units of the invoice's
/// currency (`{{ late_payment.interest | money(invoice.currency) }}`),
/// dates as `YYYY-MM-DD`, rates as decimal text.
#[derive(Debug, Clone, Serialize)]
pub(super) struct LateVars {
    regime: &'static str,
    law: &'static str,
    days: i64,
    interest: i64,
    compensation: i64,
    total: i64,
    now_due: i64,
    pay_by: String,
    periods: Vec<PeriodVars>,
}

#[derive(Debug, Clone, Serialize)]
struct PeriodVars {
    from: String,
    to: String,
    days: i64,
    rate: String,
    interest: i64,
}

/// The law's name as a letter cites it.
fn law_name(regime: Regime) -> &'static str {
    match regime {
        Regime::None => "",
        Regime::Eu => "Directive 2011/7/EU",
        Regime::DeB2b => "§ 288 Abs. 2 und 5 BGB",
        Regime::DeB2c => "§ 288 Abs. 1 BGB",
        Regime::Fr => "article L441-10 du Code de commerce",
        Regime::Uk => "the Late Payment of Commercial Debts (Interest) Act 1998",
        Regime::Custom => "our terms of payment",
    }
}

/// The pay-by date of a claim sent on `today`.
pub(super) fn pay_by(late: &LatePaymentSettings, today: NaiveDate) -> NaiveDate {
    shift(today, i64::from(late.pay_within_days))
}

impl LateVars {
    pub(super) fn new(claim: &Claim, invoice: &Invoice, pay_by: NaiveDate) -> Self {
        Self {
            regime: claim.regime.name(),
            law: law_name(claim.regime),
            days: claim.days,
            interest: claim.interest_minor,
            compensation: claim.compensation_minor,
            total: claim.total_minor,
            now_due: claim.now_due_minor(&invoice.amount),
            pay_by: pay_by.to_string(),
            periods: claim
                .periods
                .iter()
                .map(|p| PeriodVars {
                    from: p.from.to_string(),
                    to: p.to.to_string(),
                    days: p.days,
                    rate: p.rate_percent.to_string(),
                    interest: p.interest_minor,
                })
                .collect(),
        }
    }
}

/// The words of a letter, in English or German.
struct Words {
    title: &'static str,
    intro: &'static str,
    number: &'static str,
    amount: &'static str,
    due: &'static str,
    days: &'static str,
    header: [&'static str; 5],
    interest: &'static str,
    compensation: &'static str,
    total: &'static str,
    now_due: &'static str,
    pay_by: &'static str,
    pay_online: &'static str,
    regards: &'static str,
}

const EN: Words = Words {
    title: "Claim for late-payment interest and compensation",
    intro: "The invoice below is unpaid past its due date. Under {law} we claim interest on its amount from the day after the due date through {today}, as worked out below, and the fixed compensation for recovery costs.",
    number: "Invoice",
    amount: "Amount",
    due: "Due date",
    days: "Days late",
    header: ["From", "To", "Days", "Rate % p.a.", "Interest"],
    interest: "Interest",
    compensation: "Compensation",
    total: "Total claimed",
    now_due: "Amount now due",
    pay_by: "Please pay by",
    pay_online: "Pay online:",
    regards: "Regards,",
};

const DE: Words = Words {
    title: "Forderung von Verzugszinsen und Pauschale",
    intro: "Die unten genannte Rechnung ist über ihr Fälligkeitsdatum hinaus unbezahlt. Nach {law} berechnen wir Zinsen auf den Rechnungsbetrag vom Tag nach der Fälligkeit bis zum {today}, wie unten aufgeschlüsselt, und die Pauschale für Beitreibungskosten.",
    number: "Rechnung",
    amount: "Betrag",
    due: "Fällig am",
    days: "Tage im Verzug",
    header: ["Von", "Bis", "Tage", "Zinssatz % p.a.", "Zinsen"],
    interest: "Zinsen",
    compensation: "Pauschale",
    total: "Forderung gesamt",
    now_due: "Jetzt fällig",
    pay_by: "Bitte zahlen Sie bis",
    pay_online: "Online bezahlen:",
    regards: "Mit freundlichen Grüßen",
};

/// The letter's file name: `letter-<number>.pdf`, the number with
/// anything but letters, digits, `-`, `_` and `.` replaced by `_`.
pub fn letter_name(number: &str) -> String {
    let safe: String = sanitize(number, MAX_NUMBER_CHARS)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("letter-{safe}.pdf")
}

/// What a letter needs besides the claim.
pub(super) struct LetterFacts<'a> {
    pub(super) invoice: &'a Invoice,
    pub(super) customer: &'a Customer,
    pub(super) company: &'a CompanySettings,
    pub(super) today: NaiveDate,
    pub(super) pay_by: NaiveDate,
    pub(super) payment_link: &'a str,
    /// The locale the mail's figures are formatted in.
    pub(super) locale: &'a str,
}

/// The letter stating `claim`, as a PDF attachment.
pub(super) fn letter(
    formats: &Formats,
    claim: &Claim,
    facts: &LetterFacts<'_>,
) -> Result<Attachment, String> {
    let tag = facts.locale;
    let words = if tag.to_ascii_lowercase().starts_with("de") {
        &DE
    } else {
        &EN
    };
    let currency = facts.invoice.amount.currency().as_str();
    let failed = |e: String| format!("the letter: {e}");
    let money = |minor: i64| formats.money(minor, currency, tag).map_err(failed);
    let date = |d: NaiveDate| formats.long_date(d, tag).map_err(failed);
    let mut creditor = vec![sanitize(&facts.company.name, MAX_NAME_CHARS)];
    creditor.extend(facts.company.support_email.clone());
    let mut debtor = vec![sanitize(&facts.customer.name, MAX_NAME_CHARS)];
    debtor.push(facts.customer.email.cell().trim().to_owned());
    let mut table_rows = Vec::with_capacity(claim.periods.len());
    for p in &claim.periods {
        table_rows.push(vec![
            date(p.from)?,
            date(p.to)?,
            p.days.to_string(),
            p.rate_percent.to_string(),
            money(p.interest_minor)?,
        ]);
    }
    let intro = words
        .intro
        .replace("{law}", law_name(claim.regime))
        .replace("{today}", &date(facts.today)?);
    let mut outro = Vec::new();
    if !facts.payment_link.is_empty() {
        outro.push(format!("{} {}", words.pay_online, facts.payment_link));
    }
    outro.push(format!("{} {}", words.regards, facts.company.name));
    let page = LetterPage {
        creditor,
        debtor,
        place_date: date(facts.today)?,
        title: words.title.to_owned(),
        intro: vec![intro],
        facts: vec![
            (
                words.number.to_owned(),
                sanitize(&facts.invoice.number, MAX_NUMBER_CHARS),
            ),
            (
                words.amount.to_owned(),
                money(facts.invoice.amount.minor())?,
            ),
            (words.due.to_owned(), date(facts.invoice.due_date)?),
            (words.days.to_owned(), claim.days.to_string()),
        ],
        table_header: words.header.iter().map(|h| (*h).to_owned()).collect(),
        table_rows,
        totals: vec![
            (words.interest.to_owned(), money(claim.interest_minor)?),
            (
                words.compensation.to_owned(),
                money(claim.compensation_minor)?,
            ),
            (words.total.to_owned(), money(claim.total_minor)?),
            (
                words.now_due.to_owned(),
                money(claim.now_due_minor(&facts.invoice.amount))?,
            ),
            (words.pay_by.to_owned(), date(facts.pay_by)?),
        ],
        outro,
    };
    let file = render(&page).map_err(|e| failed(e.to_string()))?;
    Ok(Attachment {
        filename: letter_name(&facts.invoice.number),
        bytes: file.bytes,
        encoded: file.encoded,
    })
}
