//! Late-payment interest and compensation by the law that applies
//! (docs/late-payment.md): which [`Regime`] an invoice is under, the
//! [`Law`] it names (a reference-rate series, the points added to it, the
//! fixed compensation), the reference rates read from their file
//! ([`rates`]), and the exact [`Claim`] an invoice carries on a send date
//! ([`interest`]).
//!
//! Pure code, no I/O but the rates file read once at start-up: a reminder
//! costs no query, and a claim depends only on the invoice, the send date
//! and the rates in force when it was priced.

use crate::domain::Money;
pub use crate::domain::Regime;

pub mod interest;
pub mod rates;

pub use interest::{Claim, Period, PriceError, missing_today, price};
pub use rates::{HalfYear, Rate, Rates};

/// The fixed compensation a law adds once per late invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compensation {
    None,
    /// This many minor units, when the invoice is in `currency`.
    Flat {
        minor: i64,
        currency: String,
    },
    /// The UK's: in GBP, by the invoice's amount (under 1,000.00: 40;
    /// under 10,000.00: 70; else 100).
    UkBySize,
}

/// What a regime claims: the series of its reference rate, the points
/// added, and the compensation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Law {
    pub regime: Regime,
    pub series: String,
    pub points: Rate,
    pub compensation: Compensation,
}

/// The custom regime's terms (`[late_payment.custom]`, validated).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CustomTerms {
    pub series: String,
    pub points: Rate,
    pub compensation_minor: i64,
    pub compensation_currency: String,
}

impl Law {
    /// The law `regime` names (`custom`: with `custom`'s terms); None for
    /// [`Regime::None`].
    pub fn of(regime: Regime, custom: &CustomTerms) -> Option<Self> {
        let euro = |minor| Compensation::Flat {
            minor,
            currency: "EUR".into(),
        };
        let law = |series: &str, points: i64, compensation| Law {
            regime,
            series: series.into(),
            points: Rate(points.saturating_mul(rates::RATE_UNITS)),
            compensation,
        };
        Some(match regime {
            Regime::None => return None,
            Regime::Eu => law("ecb", 8, euro(4_000)),
            Regime::DeB2b => law("de_base", 9, euro(4_000)),
            Regime::DeB2c => law("de_base", 5, Compensation::None),
            Regime::Fr => law("ecb", 10, euro(4_000)),
            Regime::Uk => law("boe", 8, Compensation::UkBySize),
            Regime::Custom => Law {
                regime,
                series: custom.series.clone(),
                points: custom.points,
                compensation: if custom.compensation_minor == 0 {
                    Compensation::None
                } else {
                    Compensation::Flat {
                        minor: custom.compensation_minor,
                        currency: custom.compensation_currency.trim().to_ascii_uppercase(),
                    }
                },
            },
        })
    }

    /// The compensation for an invoice of `amount`, in its currency: 0
    /// when the law gives none or names another currency.
    pub fn compensation(&self, amount: &Money) -> i64 {
        let code = amount.currency().code();
        match &self.compensation {
            Compensation::None => 0,
            Compensation::Flat { minor, currency } if *currency == code => *minor,
            Compensation::Flat { .. } => 0,
            Compensation::UkBySize if code == "GBP" => match amount.minor() {
                m if m < 100_000 => 4_000,
                m if m < 1_000_000 => 7_000,
                _ => 10_000,
            },
            Compensation::UkBySize => 0,
        }
    }
}
