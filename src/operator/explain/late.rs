//! `explain`'s late-payment part: the claim today's due step states (the
//! JSON's `late_payment`, and its working in words for the text form and
//! the console), and the wait when the rates file has no rate for today's
//! half-year (`rates_out_of_date`), as the claim's own SQL condition
//! (`db::owing::priced!`) decides it for the tick.

use chrono::NaiveDate;

use super::report::{Reason, Until};
use crate::config::LatePaymentSettings;
use crate::domain::{Currency, Invoice, Regime};
use crate::late_payment::{Claim, PriceError, missing_today, price};
use crate::stages::{Stages, Step};

/// A reason with its sentence and, for a wait, when it ends (as `decide`
/// has it).
type Decision = (Reason, String, Option<Until>);

/// The claim `due_step` states for `invoice` if sent `today`, and why it
/// cannot be priced today, if it cannot.
pub(super) fn today(
    stages: &Stages,
    late: &LatePaymentSettings,
    invoice: &Invoice,
    due_step: Option<&Step>,
    today: NaiveDate,
) -> (Option<Claim>, Option<PriceError>) {
    if !due_step.is_some_and(|s| stages.stage(s).late_payment) {
        return (None, None);
    }
    let regime = invoice.late_payment_regime.unwrap_or(late.regime);
    let Some(law) = late.law(regime) else {
        return (None, None);
    };
    if let Some(missing) = missing_today(&law, &late.rates, today) {
        return (None, Some(missing));
    }
    match price(&law, &late.rates, &invoice.amount, invoice.due_date, today) {
        Ok(claim) => (Some(claim), None),
        Err(e) => (None, Some(e)),
    }
}

/// A step that would go today (or after its backoff) waits while its
/// claim cannot be priced.
pub(super) fn rates_verdict(
    decision: Decision,
    waiting: Option<&PriceError>,
    due_step: Option<&Step>,
) -> Decision {
    let (Some(missing), Some(step)) = (waiting, due_step) else {
        return decision;
    };
    match decision.0 {
        Reason::WillSendToday | Reason::BackoffUntil => (
            Reason::RatesOutOfDate,
            format!(
                "step {} claims late-payment interest, and {missing}: it waits until late_payment.rates_file has it (docs/late-payment.md); other steps go",
                step.key
            ),
            None,
        ),
        _ => decision,
    }
}

/// `584` minor units of EUR as `5.84 EUR`.
pub fn plain_money(minor: i64, currency: &Currency) -> String {
    let units = u32::from(currency.minor_units());
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let code = currency.code();
    match 10u64.checked_pow(units) {
        Some(scale) if units > 0 => {
            let width = usize::try_from(units).unwrap_or(2);
            format!(
                "{sign}{}.{:0width$} {code}",
                abs / scale,
                abs % scale,
                width = width
            )
        }
        _ => format!("{sign}{abs} {code}"),
    }
}

/// The claim's working in words, a line each: the law, each period's days,
/// rate and interest, then the interest, the compensation, the total and
/// the amount now due.
pub fn working(claim: &Claim, amount_minor: i64, currency: &Currency) -> Vec<String> {
    let money = |minor| plain_money(minor, currency);
    let mut lines = vec![format!(
        "late payment under {} ({}), {} days late:",
        claim.regime,
        regime_words(claim.regime),
        claim.days
    )];
    for p in &claim.periods {
        lines.push(format!(
            "  {} to {}: {} days at {} % = {}",
            p.from,
            p.to,
            p.days,
            p.rate_percent,
            money(p.interest_minor)
        ));
    }
    lines.push(format!(
        "  interest {} (summed exactly, rounded once), compensation {}, total claimed {}, amount now due {}",
        money(claim.interest_minor),
        money(claim.compensation_minor),
        money(claim.total_minor),
        money(amount_minor.saturating_add(claim.total_minor))
    ));
    lines
}

fn regime_words(regime: Regime) -> &'static str {
    match regime {
        Regime::None => "nothing claimed",
        Regime::Eu => "ECB rate + 8 points, 40 EUR",
        Regime::DeB2b => "base rate + 9 points, 40 EUR",
        Regime::DeB2c => "base rate + 5 points",
        Regime::Fr => "ECB rate + 10 points, 40 EUR",
        Regime::Uk => "Bank Rate + 8 points, 40/70/100 GBP",
        Regime::Custom => "late_payment.custom",
    }
}
