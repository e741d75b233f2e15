//! The law a late invoice is claimed under, by name: the value of the
//! `late_payment.regime` setting and of the source's `late_payment_regime`
//! column, parsed once where a row enters.

use std::fmt;
use std::str::FromStr;

/// The law a late invoice is claimed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Regime {
    /// Nothing is claimed.
    #[serde(rename = "none")]
    None,
    /// Directive 2011/7/EU: the ECB rate + 8 points, 40 EUR.
    #[serde(rename = "eu")]
    Eu,
    /// BGB 288 (2), (5): the base rate + 9 points, 40 EUR.
    #[serde(rename = "de-b2b")]
    DeB2b,
    /// BGB 288 (1): the base rate + 5 points, no flat sum.
    #[serde(rename = "de-b2c")]
    DeB2c,
    /// Code de commerce L441-10: the ECB rate + 10 points, 40 EUR.
    #[serde(rename = "fr")]
    Fr,
    /// Late Payment of Commercial Debts (Interest) Act 1998: Bank Rate + 8
    /// points, 40 / 70 / 100 GBP by the debt's size.
    #[serde(rename = "uk")]
    Uk,
    /// `[late_payment.custom]`.
    #[serde(rename = "custom")]
    Custom,
}

impl Regime {
    pub const ALL: [Regime; 7] = [
        Self::None,
        Self::Eu,
        Self::DeB2b,
        Self::DeB2c,
        Self::Fr,
        Self::Uk,
        Self::Custom,
    ];

    /// Its name in the settings and the source column.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Eu => "eu",
            Self::DeB2b => "de-b2b",
            Self::DeB2c => "de-b2c",
            Self::Fr => "fr",
            Self::Uk => "uk",
            Self::Custom => "custom",
        }
    }
}

impl fmt::Display for Regime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Regime {
    type Err = String;

    /// A regime's name, case and surrounding blanks ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                format!(
                    "{s:?} is not a late-payment regime (none, eu, de-b2b, de-b2c, fr, uk or custom)"
                )
            })
    }
}
