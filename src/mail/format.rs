//! Money and dates in the customer's language, for the `money` and `date`
//! template filters.
//!
//! Minor units come from the currency ([`Currency`], ISO 4217), grouping
//! and decimal separators and date patterns from CLDR (ICU4X's compiled
//! data); nothing here is a hand-written table. An unknown currency is an
//! error naming it, never a guess.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{Datelike, NaiveDate};
use icu_datetime::DateTimeFormatter;
use icu_datetime::fieldsets::YMD;
use icu_decimal::DecimalFormatter;
use icu_decimal::input::Decimal;
use icu_locale_core::Locale;

use crate::domain::Currency;
use crate::locale::parse_locale;

/// Formatters by locale tag (the render's `locale` as it is written),
/// built on first use (building one loads its data), and the long dates
/// already written: a tick formats the same few due dates thousands of
/// times. Bounded: at most [`MAX_KEPT_LOCALES`] tags and
/// [`MAX_KEPT_DATES`] dates per tag; a cache that is full starts over, so
/// a source that sends a new locale on every row costs time, never memory.
#[derive(Default, Clone)]
pub struct Formats {
    decimals: Arc<Mutex<HashMap<String, Arc<DecimalFormatter>>>>,
    dates: Arc<Mutex<HashMap<String, Arc<DateTimeFormatter<YMD>>>>>,
    long_dates: Arc<Mutex<HashMap<String, HashMap<NaiveDate, String>>>>,
}

/// The most long dates kept per locale; the cache starts over beyond it.
const MAX_KEPT_DATES: usize = 4096;

/// The most locale tags each cache keeps; it starts over beyond it.
const MAX_KEPT_LOCALES: usize = 64;

/// Makes room for `key` in `cache`: empties it when it is full and
/// `key` is not in it.
fn make_room<V>(cache: &mut HashMap<String, V>, key: &str, max: usize) {
    if cache.len() >= max && !cache.contains_key(key) {
        cache.clear();
    }
}

/// The formatter kept for `tag` in `cache`, or one built now (and kept).
fn kept<F>(
    cache: &Mutex<HashMap<String, Arc<F>>>,
    tag: &str,
    build: impl FnOnce() -> Result<F, String>,
) -> Result<Arc<F>, String> {
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = cache.get(tag) {
        return Ok(f.clone());
    }
    let f = Arc::new(build()?);
    make_room(&mut cache, tag, MAX_KEPT_LOCALES);
    cache.insert(tag.to_owned(), f.clone());
    Ok(f)
}

/// The locale a tag names; an unknown tag formats as the root locale.
fn locale_of(tag: &str) -> Locale {
    parse_locale(tag).unwrap_or(Locale::UNKNOWN)
}

impl Formats {
    /// `123456` minor units of EUR in `de` → `1.234,56 EUR`.
    pub fn money(&self, minor: i64, currency: &str, tag: &str) -> Result<String, String> {
        let currency = Currency::parse(currency)?;
        let formatter = kept(&self.decimals, tag, || {
            let locale = locale_of(tag);
            DecimalFormatter::try_new((&locale).into(), Default::default())
                .map_err(|e| format!("no number format for {locale}: {e}"))
        })?;
        let mut amount = Decimal::from(minor);
        amount.multiply_pow10(-i16::try_from(currency.minor_units()).unwrap_or(0));
        Ok(format!("{} {}", formatter.format(&amount), currency.code()))
    }

    /// `2026-11-20` in `de` → `20. November 2026`; in `en` → `November 20, 2026`.
    pub fn long_date(&self, date: NaiveDate, tag: &str) -> Result<String, String> {
        {
            let kept = self.long_dates.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(written) = kept.get(tag).and_then(|dates| dates.get(&date)) {
                return Ok(written.clone());
            }
        }
        let formatter = kept(&self.dates, tag, || {
            let locale = locale_of(tag);
            DateTimeFormatter::try_new((&locale).into(), YMD::long())
                .map_err(|e| format!("no date format for {locale}: {e}"))
        })?;
        let month = u8::try_from(date.month()).unwrap_or(1);
        let day = u8::try_from(date.day()).unwrap_or(1);
        let iso = icu_calendar::Date::try_new_iso(date.year(), month, day)
            .map_err(|e| format!("date {date} out of range: {e}"))?;
        let written = formatter.format(&iso).to_string();
        let mut kept = self.long_dates.lock().unwrap_or_else(|p| p.into_inner());
        make_room(&mut kept, tag, MAX_KEPT_LOCALES);
        let dates = kept.entry(tag.to_owned()).or_default();
        if dates.len() >= MAX_KEPT_DATES {
            dates.clear();
        }
        dates.insert(date, written.clone());
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn money(minor: i64, currency: &str, tag: &str) -> String {
        Formats::default()
            .money(minor, currency, tag)
            .unwrap_or_else(|e| e)
    }

    #[test]
    fn amounts_use_the_currencys_minor_units_and_the_locales_separators() {
        assert_eq!(money(123_456, "EUR", "en"), "1,234.56 EUR");
        assert_eq!(money(123_456, "EUR", "de"), "1.234,56 EUR");
        assert_eq!(money(1000, "JPY", "en"), "1,000 JPY");
        assert_eq!(money(1000, "JPY", "de"), "1.000 JPY");
        assert_eq!(money(1_234_567, "KWD", "en"), "1,234.567 KWD");
        assert_eq!(money(1_234_567, "KWD", "de"), "1.234,567 KWD");
        assert_eq!(money(5, "USD", "en"), "0.05 USD");
        assert!(money(5, "XXQ", "en").contains("unknown currency"));
    }

    #[test]
    fn dates_follow_the_locale() {
        let f = Formats::default();
        let date = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap_or_default();
        for _ in 0..2 {
            let en = f.long_date(date, "en");
            let de = f.long_date(date, "de");
            assert_eq!(en.as_deref(), Ok("November 20, 2026"));
            assert_eq!(de.as_deref(), Ok("20. November 2026"));
        }
    }

    #[test]
    fn a_new_locale_on_every_row_never_grows_the_caches_past_their_bound() {
        let formats = Formats::default();
        let due = NaiveDate::from_ymd_opt(2026, 11, 20).unwrap();
        for i in 0..(3 * MAX_KEPT_LOCALES) {
            let tag = format!("en-x-row{i}");
            assert_eq!(formats.money(100, "EUR", &tag).unwrap(), "1.00 EUR");
            assert!(formats.long_date(due, &tag).unwrap().contains("2026"));
        }
        assert!(formats.decimals.lock().unwrap().len() <= MAX_KEPT_LOCALES);
        assert!(formats.dates.lock().unwrap().len() <= MAX_KEPT_LOCALES);
        assert!(formats.long_dates.lock().unwrap().len() <= MAX_KEPT_LOCALES);
    }
}
