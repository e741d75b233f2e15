//! The reference rates file: one series per published rate (`ecb`,
//! `de_base`, `boe`, or any other name a custom regime uses), one entry per
//! half-year on its first day, `{ from = "2026-01-01", percent = 2.15 }`.
//!
//! Read once at start-up into exact values ([`Rate`], ten-thousandths of a
//! percentage point: never a float past parsing). A file that does not
//! parse is an error naming its line; a series with a half-year missing
//! between its first and last entries, an entry not on a half-year's first
//! day, or a value with more than four decimals is an error naming the
//! series and the half-year. A series simply ends where no published value
//! could be confirmed: [`Series::rate_in`] then answers None for the
//! half-years after it, and the stages that need it wait.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{Datelike, NaiveDate};

/// The rates the project ships (docs/late-payment.md says where each value
/// is published).
pub const SHIPPED: &str = include_str!("../../config/rates.toml");

/// A percentage, exact: ten-thousandths of a percentage point (2.15 % is
/// 21_500).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Rate(pub i64);

/// Units of [`Rate`] in one percentage point.
pub const RATE_UNITS: i64 = 10_000;

impl Rate {
    /// A decimal percentage written in text (`"2.15"`, `"-0.88"`, `"8"`),
    /// with at most four decimals.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
            return Err(format!("{text:?} is not a decimal percentage"));
        }
        if fraction.len() > 4 {
            return Err(format!("{text} has more than four decimals"));
        }
        let whole: i64 = whole
            .parse()
            .ok()
            .filter(|w| *w <= 1_000)
            .ok_or_else(|| format!("{text} is out of range (at most 1000 percent)"))?;
        let padded = format!("{fraction:0<4}");
        let fraction: i64 = padded.parse().unwrap_or(0);
        let units = whole * RATE_UNITS + fraction;
        Ok(Self(if negative { -units } else { units }))
    }

    /// A TOML number as written (`2.15` or `8`): a float is read back from
    /// its shortest decimal form, which is the text the file holds.
    pub fn from_toml(value: &toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Float(f) if f.is_finite() => Self::parse(&f.to_string()),
            toml::Value::Integer(i) => Self::parse(&i.to_string()),
            other => Err(format!("{other} is not a number")),
        }
    }

    /// The sum of two rates (a reference rate and a regime's points).
    pub fn plus(self, other: Rate) -> Rate {
        Rate(self.0.saturating_add(other.0))
    }
}

impl fmt::Display for Rate {
    /// `2.15`, `-0.88`, `10.1275`, `8.00`: at least two decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let units = RATE_UNITS.unsigned_abs();
        let mut fraction = format!("{:04}", abs % units);
        while fraction.len() > 2 && fraction.ends_with('0') {
            fraction.pop();
        }
        write!(f, "{sign}{}.{fraction}", abs / units)
    }
}

/// A half-year: January to June, or July to December.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HalfYear {
    pub year: i32,
    pub second: bool,
}

impl HalfYear {
    /// The half-year `date` falls in.
    pub fn of(date: NaiveDate) -> Self {
        Self {
            year: date.year(),
            second: date.month() > 6,
        }
    }

    /// Its first day (1 January or 1 July).
    pub fn first_day(self) -> NaiveDate {
        let month = if self.second { 7 } else { 1 };
        NaiveDate::from_ymd_opt(self.year, month, 1).unwrap_or(NaiveDate::MIN)
    }

    /// Its last day (30 June or 31 December).
    pub fn last_day(self) -> NaiveDate {
        let (month, day) = if self.second { (12, 31) } else { (6, 30) };
        NaiveDate::from_ymd_opt(self.year, month, day).unwrap_or(NaiveDate::MAX)
    }

    /// The half-year after this one.
    pub fn next(self) -> Self {
        if self.second {
            Self {
                year: self.year.saturating_add(1),
                second: false,
            }
        } else {
            Self {
                year: self.year,
                second: true,
            }
        }
    }
}

impl fmt::Display for HalfYear {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.first_day())
    }
}

/// One series: its rate for each half-year from `first` on, with no gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    first: HalfYear,
    rates: Vec<Rate>,
}

impl Series {
    /// The reference rate of `half`, if the series has it.
    pub fn rate_in(&self, half: HalfYear) -> Option<Rate> {
        let mut at = self.first;
        for rate in &self.rates {
            if at == half {
                return Some(*rate);
            }
            if at > half {
                return None;
            }
            at = at.next();
        }
        None
    }

    /// The first half-year it has.
    pub fn first(&self) -> HalfYear {
        self.first
    }

    /// The last half-year it has.
    pub fn last(&self) -> HalfYear {
        let mut at = self.first;
        for _ in 1..self.rates.len() {
            at = at.next();
        }
        at
    }
}

/// Every series of one rates file, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rates {
    series: BTreeMap<String, Series>,
}

impl Rates {
    /// The series called `name`.
    pub fn series(&self, name: &str) -> Option<&Series> {
        self.series.get(name)
    }

    /// The series' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.series.keys().map(String::as_str)
    }

    /// Parses a rates file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text.get(..s.start).unwrap_or("").matches('\n').count() + 1)
                .unwrap_or(1);
            format!("{file}, line {line}: {}", e.message())
        })?;
        let mut series = BTreeMap::new();
        for (name, entries) in &table {
            let at = |what: String| format!("{file}: series {name}: {what}");
            let toml::Value::Array(entries) = entries else {
                return Err(at(
                    "must be an array of { from = \"YYYY-01-01\", percent = N }".into(),
                ));
            };
            let mut dated = Vec::with_capacity(entries.len());
            for entry in entries {
                let (from, rate) = entry_of(entry).map_err(&at)?;
                dated.push((from, rate));
            }
            dated.sort_by_key(|(from, _)| *from);
            let Some((first, _)) = dated.first().copied() else {
                return Err(at("has no entries".into()));
            };
            let mut expected = first;
            let mut rates = Vec::with_capacity(dated.len());
            for (half, rate) in dated {
                if half < expected {
                    return Err(at(format!("has two entries for the half-year {half}")));
                }
                if half > expected {
                    return Err(at(format!(
                        "has no entry for the half-year {expected} (a gap before {half})"
                    )));
                }
                rates.push(rate);
                expected = expected.next();
            }
            series.insert(name.clone(), Series { first, rates });
        }
        Ok(Self { series })
    }
}

/// One `{ from, percent }` entry.
fn entry_of(entry: &toml::Value) -> Result<(HalfYear, Rate), String> {
    let shape = "each entry is { from = \"YYYY-01-01\" or \"YYYY-07-01\", percent = N }";
    let toml::Value::Table(t) = entry else {
        return Err(shape.into());
    };
    if let Some(key) = t
        .keys()
        .find(|k| !matches!(k.as_str(), "from" | "percent" | "source"))
    {
        return Err(format!("unknown key {key:?} ({shape})"));
    }
    let from = match t.get("from") {
        Some(toml::Value::String(s)) => NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
            .map_err(|_| format!("from = {s:?} is not a date ({shape})"))?,
        Some(toml::Value::Datetime(d)) => NaiveDate::parse_from_str(&d.to_string(), "%Y-%m-%d")
            .map_err(|_| format!("from = {d} is not a date ({shape})"))?,
        _ => return Err(shape.into()),
    };
    let half = HalfYear::of(from);
    if half.first_day() != from {
        return Err(format!(
            "from = {from} is not the first day of a half-year (1 January or 1 July)"
        ));
    }
    let rate = t
        .get("percent")
        .ok_or_else(|| shape.to_owned())
        .and_then(Rate::from_toml)
        .map_err(|e| format!("the entry from {from}: percent {e}"))?;
    Ok((half, rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_exact_to_four_decimals() {
        assert_eq!(Rate::parse("2.15"), Ok(Rate(21_500)));
        assert_eq!(Rate::parse("-0.88"), Ok(Rate(-8_800)));
        assert_eq!(Rate::parse("8"), Ok(Rate(80_000)));
        assert!(Rate::parse("1.23456").is_err());
        assert!(Rate::parse("1e3").is_err());
        assert_eq!(Rate(21_500).to_string(), "2.15");
        assert_eq!(Rate(-8_800).to_string(), "-0.88");
        assert_eq!(Rate(80_000).to_string(), "8.00");
        assert_eq!(Rate(101_275).to_string(), "10.1275");
        assert_eq!(Rate::from_toml(&toml::Value::Float(2.15)), Ok(Rate(21_500)));
    }

    #[test]
    fn a_series_answers_the_half_years_it_has_and_nothing_after() {
        let text = "ecb = [{ from = \"2025-07-01\", percent = 2.15 }, { from = \"2026-01-01\", percent = 2.0 }]";
        let rates = Rates::parse(text, "r.toml").unwrap_or_default();
        let ecb = rates.series("ecb");
        let day = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap_or_default();
        let at = |d| ecb.and_then(|s| s.rate_in(HalfYear::of(d)));
        assert_eq!(at(day(2025, 9, 1)), Some(Rate(21_500)));
        assert_eq!(at(day(2026, 6, 30)), Some(Rate(20_000)));
        assert_eq!(at(day(2026, 7, 1)), None);
        assert_eq!(at(day(2025, 6, 30)), None);
    }

    #[test]
    fn a_gap_a_stray_day_and_a_bad_line_are_named() {
        let gap = "de_base = [{ from = \"2024-01-01\", percent = 3.62 }, { from = \"2025-01-01\", percent = 2.27 }]";
        assert_eq!(
            Rates::parse(gap, "r.toml"),
            Err("r.toml: series de_base: has no entry for the half-year 2024-07-01 (a gap before 2025-01-01)".into())
        );
        let stray = "boe = [{ from = \"2024-02-01\", percent = 5.25 }]";
        assert!(Rates::parse(stray, "r.toml").is_err_and(|e| e.contains("not the first day")));
        let broken = "# rates\n\necb = [{ from = \"2024-01-01\" percent = 4.5 }]\n";
        assert!(Rates::parse(broken, "r.toml").is_err_and(|e| e.starts_with("r.toml, line 3:")));
    }

    #[test]
    fn the_shipped_file_parses() {
        let rates = Rates::parse(SHIPPED, "rates.toml");
        assert!(rates.is_ok(), "{rates:?}");
        let rates = rates.unwrap_or_default();
        for name in ["ecb", "de_base", "boe"] {
            assert!(rates.series(name).is_some(), "{name}");
        }
    }
}
