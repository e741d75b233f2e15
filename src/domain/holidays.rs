//! Holiday calendars: the days a send window stays closed whole. The
//! built-in calendars are named by ISO 3166 code and subdivision (`DE`,
//! `DE-BY`, `GB-SCT`, `US-CA`, ...) and come from `config/holidays.txt`,
//! which `scripts/holiday_calendars.py` writes from python-holidays (its
//! release is named in the file's header); they are compiled in, never
//! fetched. A calendar knows the years that file covers; outside them it
//! has no holidays. A calendar can also be made of given days (an `.ics`
//! file's, `config::calendars`), or a built-in one given more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use chrono::NaiveDate;

/// `config/holidays.txt`: `<calendar> <year> <MMDD>...` per line, `#`
/// comments.
const BUILT_IN: &str = include_str!("../../config/holidays.txt");

/// One calendar's holidays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holidays {
    name: String,
    days: BTreeSet<NaiveDate>,
}

impl Holidays {
    /// The built-in calendar `name` (`DE-BY`; any case), or None when
    /// there is none of that name.
    pub fn built_in(name: &str) -> Option<Self> {
        BUILT_IN_CALENDARS
            .get(&name.trim().to_ascii_uppercase())
            .map(|h| Self::clone(h))
    }

    /// Every built-in calendar, by name (upper case), read once.
    pub fn all_built_in() -> &'static BTreeMap<String, Arc<Holidays>> {
        &BUILT_IN_CALENDARS
    }

    /// A calendar of its own: `name` and its `days` (an `.ics` file's).
    pub fn of_days(name: impl Into<String>, days: impl IntoIterator<Item = NaiveDate>) -> Self {
        Self {
            name: name.into(),
            days: days.into_iter().collect(),
        }
    }

    /// This calendar with `days` added to its own.
    pub fn with_days(mut self, days: impl IntoIterator<Item = NaiveDate>) -> Self {
        self.days.extend(days);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `date` is a holiday of this calendar.
    pub fn contains(&self, date: NaiveDate) -> bool {
        self.days.contains(&date)
    }
}

/// The built-in calendars, parsed from [`BUILT_IN`] on first use.
static BUILT_IN_CALENDARS: LazyLock<BTreeMap<String, Arc<Holidays>>> = LazyLock::new(|| {
    let mut all: BTreeMap<String, BTreeSet<NaiveDate>> = BTreeMap::new();
    for line in BUILT_IN.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else {
            continue;
        };
        let days = all.entry(name.to_owned()).or_default();
        let Some(year) = fields.next().and_then(|y| y.parse::<i32>().ok()) else {
            continue;
        };
        days.extend(fields.filter_map(|md| {
            let (month, day) = (md.get(..2)?.parse().ok()?, md.get(2..)?.parse().ok()?);
            NaiveDate::from_ymd_opt(year, month, day)
        }));
    }
    all.into_iter()
        .map(|(name, days)| (name.clone(), Arc::new(Holidays { name, days })))
        .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of every built-in calendar, in the file's order.
    fn built_in_names() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for line in BUILT_IN.lines().filter(|l| !l.starts_with('#')) {
            if let Some(name) = line.split_ascii_whitespace().next()
                && names.last() != Some(&name)
            {
                names.push(name);
            }
        }
        names
    }

    fn date(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn a_state_has_its_own_holidays_beside_the_nations() {
        let by = Holidays::built_in("DE-BY").unwrap();
        let be = Holidays::built_in("de-be").unwrap();
        // Epiphany in Bavaria, not in Berlin; Women's Day in Berlin only.
        assert!(by.contains(date("2027-01-06")) && !be.contains(date("2027-01-06")));
        assert!(be.contains(date("2027-03-08")) && !by.contains(date("2027-03-08")));
        // Easter Monday and German Unity Day in both.
        for d in ["2027-03-29", "2027-10-03"] {
            assert!(by.contains(date(d)) && be.contains(date(d)), "{d}");
        }
        assert!(!by.contains(date("2027-01-07")));
        assert_eq!(by.name(), "DE-BY");
    }

    #[test]
    fn the_nations_of_great_britain_differ_and_substitute_days_count() {
        let sct = Holidays::built_in("GB-SCT").unwrap();
        let eng = Holidays::built_in("GB-ENG").unwrap();
        assert!(sct.contains(date("2027-01-02")) && !eng.contains(date("2027-01-02")));
        // Christmas 2027 is a Saturday: Monday 27 and Tuesday 28 instead.
        assert!(eng.contains(date("2027-12-27")) && eng.contains(date("2027-12-28")));
    }

    #[test]
    fn every_calendar_the_issue_names_is_built_in_and_unknown_names_are_not() {
        let names = built_in_names();
        let mut wanted = vec![
            "DE", "AT", "CH", "FR", "GB", "GB-ENG", "GB-SCT", "GB-WLS", "GB-NIR", "IE", "NL", "BE",
            "ES", "IT", "US", "CA", "AU", "NZ",
        ];
        let states = [
            "BB", "BE", "BW", "BY", "HB", "HE", "HH", "MV", "NI", "NW", "RP", "SH", "SL", "SN",
            "ST", "TH",
        ];
        let states: Vec<String> = states.iter().map(|s| format!("DE-{s}")).collect();
        wanted.extend(states.iter().map(String::as_str));
        for name in wanted {
            assert!(names.contains(&name), "{name}");
            assert!(Holidays::built_in(name).is_some(), "{name}");
        }
        for unknown in ["", "XX", "DE-XX", "DE BY", "2027"] {
            assert!(Holidays::built_in(unknown).is_none(), "{unknown:?}");
        }
    }
}
