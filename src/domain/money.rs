//! An invoice's amount and currency, checked once where a source row
//! enters: a [`Currency`] is an ISO 4217 code with minor units, and
//! [`Money`] an amount in those minor units, exact, whichever of the
//! source's two amount columns it came from. Nothing above parses an
//! amount or a currency code from a row again.
//!
//! Minor units come from ISO 4217 (the `iso_currency` crate: JPY 0, EUR 2,
//! KWD 3); decimal text is read with exact decimal arithmetic (ICU4X's
//! `Decimal`). An unknown currency is an error naming it, never a guess.

use fixed_decimal::{SignedRoundingMode, UnsignedRoundingMode};
use icu_decimal::input::Decimal;

/// An ISO 4217 currency, as the source wrote its code (`"eur"`, `" EUR"`):
/// the code is shown to templates as written, and compared as written when
/// a statement totals its invoices by currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency {
    written: String,
    minor_units: u16,
}

impl Currency {
    /// The currency `code` names (case and surrounding blanks ignored), or
    /// why it names none.
    pub fn parse(code: &str) -> Result<Self, String> {
        iso_currency::Currency::from_code(&code.trim().to_ascii_uppercase())
            .and_then(|c| c.exponent())
            .map(|minor_units| Self {
                written: code.to_owned(),
                minor_units,
            })
            .ok_or_else(|| format!("unknown currency {code:?} (an ISO 4217 code such as EUR)"))
    }

    /// The code as the source wrote it.
    pub fn as_str(&self) -> &str {
        &self.written
    }

    /// The code as a message shows it: `EUR`.
    pub fn code(&self) -> String {
        self.written.trim().to_ascii_uppercase()
    }

    /// The number of decimals ISO 4217 gives it.
    pub fn minor_units(&self) -> u16 {
        self.minor_units
    }
}

/// An amount due, in minor units of its currency (cents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Money {
    minor: i64,
    currency: Currency,
}

impl Money {
    /// `minor` minor units of `currency` (the source's `amount_minor`).
    pub fn from_minor(minor: i64, currency: Currency) -> Self {
        Self { minor, currency }
    }

    /// An amount in major units (`"1234.5"`, the source's numeric `amount`)
    /// in minor units of `currency` (`123450` for EUR, `1235` for JPY
    /// `1234.5`): exact decimal arithmetic, rounding half away from zero
    /// when the amount has more decimals than the currency.
    pub fn from_major(amount: &str, currency: Currency) -> Result<Self, String> {
        let mut decimal = Decimal::try_from_str(amount.trim())
            .map_err(|_| format!("amount {amount:?} is not a decimal number"))?;
        decimal.multiply_pow10(i16::try_from(currency.minor_units).unwrap_or(0));
        decimal.round_with_mode(
            0,
            SignedRoundingMode::Unsigned(UnsignedRoundingMode::HalfExpand),
        );
        let minor = decimal
            .to_string()
            .parse()
            .map_err(|_| format!("amount {amount} {} is out of range", currency.as_str()))?;
        Ok(Self { minor, currency })
    }

    /// The amount in minor units.
    pub fn minor(&self) -> i64 {
        self.minor
    }

    pub fn currency(&self) -> &Currency {
        &self.currency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn major_to_minor(amount: &str, code: &str) -> Result<i64, String> {
        Money::from_major(amount, Currency::parse(code)?).map(|m| m.minor())
    }

    #[test]
    fn major_amounts_become_minor_units_by_the_currencys_exponent() {
        assert_eq!(major_to_minor("1234.50", "EUR"), Ok(123_450));
        assert_eq!(major_to_minor("1234.5", "eur"), Ok(123_450));
        assert_eq!(major_to_minor("1000", "JPY"), Ok(1000));
        assert_eq!(major_to_minor("1234.5", "JPY"), Ok(1235));
        assert_eq!(major_to_minor("1.2345", "KWD"), Ok(1235));
        assert_eq!(major_to_minor("0.005", "USD"), Ok(1));
        assert_eq!(major_to_minor("-2.005", "USD"), Ok(-201));
        assert!(major_to_minor("12,50", "EUR").is_err());
        assert!(major_to_minor("12.50", "XXQ").is_err_and(|e| e.contains("unknown currency")));
        assert!(major_to_minor("1e30", "EUR").is_err());
    }

    #[test]
    fn a_currency_keeps_the_code_as_written_and_shows_it_in_capitals() {
        let eur = Currency::parse(" eur").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (eur.as_str(), eur.code(), eur.minor_units()),
            (" eur", "EUR".to_owned(), 2)
        );
        assert_eq!(
            Currency::parse("XYZ"),
            Err("unknown currency \"XYZ\" (an ISO 4217 code such as EUR)".to_owned())
        );
    }
}
