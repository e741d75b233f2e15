//! `[late_payment]`: the law late invoices are claimed under
//! (docs/late-payment.md). The regime, the terms of a custom one, how long
//! the letter gives to pay, and the reference rates, read from their file
//! once here: a rates file that does not parse, or has a gap, stops the
//! start-up naming the file, the line or the series and the half-year.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, de::Error as _};

use super::ConfigError;
use crate::domain::Currency;
use crate::late_payment::rates::SHIPPED;
use crate::late_payment::{CustomTerms, Law, Rate, Rates, Regime};

/// The longest `pay_within_days` accepted.
const MAX_PAY_WITHIN_DAYS: u32 = 365;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatePaymentSettings {
    /// The regime of an invoice whose source row names none.
    #[serde(deserialize_with = "regime")]
    pub regime: Regime,
    /// The reference rates; None: the file the project ships.
    #[serde(deserialize_with = "super::types::optional_path")]
    pub rates_file: Option<PathBuf>,
    /// The letter's pay-by date is the send date plus this.
    pub pay_within_days: u32,
    pub custom: CustomSection,
    /// The rates, read by [`LatePaymentSettings::read_rates`].
    #[serde(skip)]
    pub rates: Arc<Rates>,
}

/// `[late_payment.custom]`, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomSection {
    pub series: String,
    #[serde(deserialize_with = "rate")]
    pub points: Rate,
    pub compensation_minor: i64,
    pub compensation_currency: String,
}

fn regime<'de, D: Deserializer<'de>>(de: D) -> Result<Regime, D::Error> {
    let name = super::types::string_like(de)?;
    name.parse().map_err(D::Error::custom)
}

fn rate<'de, D: Deserializer<'de>>(de: D) -> Result<Rate, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Int(i64),
        Float(f64),
        Text(String),
    }
    let text = match Written::deserialize(de)? {
        Written::Int(i) => i.to_string(),
        Written::Float(f) => f.to_string(),
        Written::Text(t) => t,
    };
    Rate::parse(&text).map_err(D::Error::custom)
}

impl LatePaymentSettings {
    /// The custom regime's terms.
    pub fn custom_terms(&self) -> CustomTerms {
        CustomTerms {
            series: self.custom.series.trim().to_owned(),
            points: self.custom.points,
            compensation_minor: self.custom.compensation_minor,
            compensation_currency: self.custom.compensation_currency.clone(),
        }
    }

    /// Whether `[late_payment.custom]` names a series (the custom regime
    /// can be chosen, by the setting or by a row).
    pub fn custom_defined(&self) -> bool {
        !self.custom.series.trim().is_empty()
    }

    /// The law of `regime` (None: `none`, or `custom` without its terms).
    pub fn law(&self, regime: Regime) -> Option<Law> {
        if regime == Regime::Custom && !self.custom_defined() {
            return None;
        }
        Law::of(regime, &self.custom_terms())
    }

    /// Reads the rates file (the shipped one when none is named).
    pub(super) fn read_rates(&mut self) -> Result<(), ConfigError> {
        let key = "late_payment.rates_file";
        let rates = match &self.rates_file {
            None => Rates::parse(SHIPPED, "the shipped rates (config/rates.toml)"),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(key, format!("cannot read {}: {e}", path.display()))
                })?;
                Rates::parse(&text, &path.display().to_string())
            }
        };
        self.rates = Arc::new(rates.map_err(|e| ConfigError::new(key, e))?);
        Ok(())
    }
}

/// The rules across keys: a custom regime's terms, and the pay-by days.
pub(super) fn check(l: &LatePaymentSettings) -> Result<(), ConfigError> {
    if l.pay_within_days > MAX_PAY_WITHIN_DAYS {
        return Err(ConfigError::new(
            "late_payment.pay_within_days",
            format!("at most {MAX_PAY_WITHIN_DAYS} days"),
        ));
    }
    if l.regime == Regime::Custom && !l.custom_defined() {
        return Err(ConfigError::new(
            "late_payment.custom.series",
            "regime \"custom\" needs the series its reference rate comes from (a series of the rates file)",
        ));
    }
    if !l.custom_defined() {
        return Ok(());
    }
    let c = &l.custom;
    if l.rates.series(c.series.trim()).is_none() {
        let names: Vec<&str> = l.rates.names().collect();
        return Err(ConfigError::new(
            "late_payment.custom.series",
            format!(
                "{:?} is not a series of the rates file (it has {})",
                c.series,
                names.join(", ")
            ),
        ));
    }
    if c.points.0 < 0 {
        return Err(ConfigError::new(
            "late_payment.custom.points",
            "must be zero or more percentage points",
        ));
    }
    if c.compensation_minor < 0 {
        return Err(ConfigError::new(
            "late_payment.custom.compensation_minor",
            "must be zero or more minor units",
        ));
    }
    if c.compensation_minor > 0 {
        Currency::parse(&c.compensation_currency)
            .map_err(|e| ConfigError::new("late_payment.custom.compensation_currency", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    fn error_key(env: &[(&str, &str)]) -> String {
        Settings::load_with(env)
            .err()
            .map(|e| e.key)
            .unwrap_or_default()
    }

    #[test]
    fn an_unknown_regime_or_a_bad_custom_section_names_its_key() {
        assert_eq!(
            error_key(&[("LATE_PAYMENT__REGIME", "de")]),
            "late_payment.regime"
        );
        assert_eq!(
            error_key(&[("LATE_PAYMENT__REGIME", "custom")]),
            "late_payment.custom.series"
        );
        let custom = |key: &'static str, value: &'static str| {
            error_key(&[
                ("LATE_PAYMENT__REGIME", "custom"),
                ("LATE_PAYMENT__CUSTOM__SERIES", "ecb"),
                ("LATE_PAYMENT__CUSTOM__COMPENSATION_MINOR", "4000"),
                ("LATE_PAYMENT__CUSTOM__COMPENSATION_CURRENCY", "EUR"),
                (key, value),
            ])
        };
        assert_eq!(
            custom("LATE_PAYMENT__CUSTOM__SERIES", "libor"),
            "late_payment.custom.series"
        );
        assert_eq!(
            custom("LATE_PAYMENT__CUSTOM__POINTS", "-1"),
            "late_payment.custom.points"
        );
        assert_eq!(
            custom("LATE_PAYMENT__CUSTOM__POINTS", "1.23456"),
            "late_payment.custom.points"
        );
        assert_eq!(
            custom("LATE_PAYMENT__CUSTOM__COMPENSATION_CURRENCY", "EURO"),
            "late_payment.custom.compensation_currency"
        );
        assert_eq!(
            custom("LATE_PAYMENT__CUSTOM__COMPENSATION_MINOR", "-5"),
            "late_payment.custom.compensation_minor"
        );
        assert_eq!(custom("LATE_PAYMENT__CUSTOM__POINTS", "7.5"), "");
        assert_eq!(
            error_key(&[("LATE_PAYMENT__PAY_WITHIN_DAYS", "400")]),
            "late_payment.pay_within_days"
        );
    }

    #[test]
    fn a_custom_section_makes_the_custom_regime_a_law_of_its_terms() {
        let settings = Settings::load_with(&[
            ("LATE_PAYMENT__CUSTOM__SERIES", "boe"),
            ("LATE_PAYMENT__CUSTOM__POINTS", "4.5"),
            ("LATE_PAYMENT__CUSTOM__COMPENSATION_MINOR", "2500"),
            ("LATE_PAYMENT__CUSTOM__COMPENSATION_CURRENCY", "gbp"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let late = &settings.late_payment;
        assert_eq!(late.regime, crate::domain::Regime::None);
        let law = late.law(crate::domain::Regime::Custom);
        assert!(
            law.as_ref()
                .is_some_and(|l| l.series == "boe" && l.points.0 == 45_000)
        );
        let none = Settings::load_with(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            none.late_payment
                .law(crate::domain::Regime::Custom)
                .is_none()
        );
    }
}
