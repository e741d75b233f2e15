//! The claim one late invoice carries: simple interest on its amount from
//! the day after its due date through the send date, each day at (its
//! half-year's reference rate + the regime's points) / 365, and the fixed
//! compensation.
//!
//! The arithmetic is exact: every period's interest is an exact fraction
//! (amount x rate x days / (100 x 10,000 x 365) in minor units, an `i128`
//! numerator over one denominator), the periods are summed as fractions,
//! and the sum is rounded once, to the minor unit, half away from zero.
//! A period's own figure, shown in the working, is its fraction rounded
//! the same way; the total is never the sum of those roundings.

use chrono::NaiveDate;

use super::rates::{HalfYear, RATE_UNITS, Rate, Rates};
use super::{Law, Regime};
use crate::domain::Money;

/// Days in the year the daily rate divides by, leap years included.
const DAYS_IN_YEAR: i128 = 365;

/// One half-year's part of the claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Period {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub days: i64,
    /// The reference rate plus the regime's points.
    #[serde(serialize_with = "rate_text")]
    pub rate_percent: Rate,
    /// This period's interest, rounded on its own (shown, never summed).
    pub interest_minor: i64,
}

/// A rate as a JSON number (`11.15`): the nearest double to the exact
/// value, which prints as it.
fn rate_text<S: serde::Serializer>(rate: &Rate, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rate.to_string().parse::<f64>().unwrap_or_default())
}

/// What a late-payment reminder claims for one invoice.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Claim {
    pub regime: Regime,
    /// Days late: from the day after the due date through the send date.
    pub days: i64,
    pub interest_minor: i64,
    /// The fixed compensation, in the invoice's currency (0 when the law
    /// gives none, or names another currency).
    pub compensation_minor: i64,
    /// Interest plus compensation.
    pub total_minor: i64,
    pub periods: Vec<Period>,
}

impl Claim {
    /// The invoice's amount plus the total claimed.
    pub fn now_due_minor(&self, amount: &Money) -> i64 {
        amount.minor().saturating_add(self.total_minor)
    }
}

/// Why no claim can be priced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// The rates file has no entry for a half-year the claim spans.
    #[error("the rates file has no {series} rate for the half-year from {half}")]
    RatesOutOfDate { series: String, half: HalfYear },
}

/// `numerator / denominator` (positive), rounded half away from zero.
fn round(numerator: i128, denominator: i128) -> i64 {
    let quotient = numerator / denominator;
    let remainder = numerator % denominator;
    let twice = remainder.saturating_mul(2).abs();
    let adjusted = if twice >= denominator {
        quotient.saturating_add(numerator.signum())
    } else {
        quotient
    };
    i64::try_from(adjusted).unwrap_or(if adjusted < 0 { i64::MIN } else { i64::MAX })
}

/// The claim of an invoice of `amount` due on `due`, sent on `send`,
/// under `law` with `rates`.
pub fn price(
    law: &Law,
    rates: &Rates,
    amount: &Money,
    due: NaiveDate,
    send: NaiveDate,
) -> Result<Claim, PriceError> {
    let denominator = i128::from(RATE_UNITS) * 100 * DAYS_IN_YEAR;
    let series = rates.series(&law.series);
    let mut periods = Vec::new();
    let mut numerator: i128 = 0;
    let mut days_late: i64 = 0;
    if let Some(first) = due.succ_opt().filter(|first| *first <= send) {
        let mut from = first;
        loop {
            let half = HalfYear::of(from);
            let to = half.last_day().min(send);
            let reference =
                series
                    .and_then(|s| s.rate_in(half))
                    .ok_or_else(|| PriceError::RatesOutOfDate {
                        series: law.series.clone(),
                        half,
                    })?;
            let rate = reference.plus(law.points);
            let days = to.signed_duration_since(from).num_days().saturating_add(1);
            let part = i128::from(amount.minor())
                .saturating_mul(i128::from(rate.0))
                .saturating_mul(i128::from(days));
            numerator = numerator.saturating_add(part);
            days_late = days_late.saturating_add(days);
            periods.push(Period {
                from,
                to,
                days,
                rate_percent: rate,
                interest_minor: round(part, denominator),
            });
            match to.succ_opt() {
                Some(next) if next <= send => from = next,
                _ => break,
            }
        }
    }
    let interest_minor = round(numerator, denominator);
    let compensation_minor = if days_late > 0 {
        law.compensation(amount)
    } else {
        0
    };
    Ok(Claim {
        regime: law.regime,
        days: days_late,
        interest_minor,
        compensation_minor,
        total_minor: interest_minor.saturating_add(compensation_minor),
        periods,
    })
}

/// The half-year whose rate `law` needs to price a claim sent on `today`,
/// if the rates do not have it.
pub fn missing_today(law: &Law, rates: &Rates, today: NaiveDate) -> Option<PriceError> {
    let half = HalfYear::of(today);
    let has = rates
        .series(&law.series)
        .and_then(|s| s.rate_in(half))
        .is_some();
    (!has).then(|| PriceError::RatesOutOfDate {
        series: law.series.clone(),
        half,
    })
}

#[cfg(test)]
#[path = "interest_tests.rs"]
mod tests;
