//! Open days: the days of `send_window.days` that are not holidays of its
//! calendar, on which the send window opens and which a business-day
//! stage (`business_days = true`) counts. Guarantees: counting is monotone (a later due date never
//! gives an earlier step date), so every step's due dates today are one
//! range; a count that runs off chrono's calendar saturates, never panics.

use std::sync::Arc;

use chrono::{Datelike, NaiveDate};

use chrono::Weekday;

use super::holidays::Holidays;

/// The weekdays a window opens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Days(u8);

const NAMES: [(&str, Weekday); 7] = [
    ("Mon", Weekday::Mon),
    ("Tue", Weekday::Tue),
    ("Wed", Weekday::Wed),
    ("Thu", Weekday::Thu),
    ("Fri", Weekday::Fri),
    ("Sat", Weekday::Sat),
    ("Sun", Weekday::Sun),
];

impl Days {
    /// Every day of the week.
    pub const ALL: Self = Self(0x7f);

    /// `"Mon-Fri"`, `"Mon,Wed,Fri"`, `"Fri-Mon"` (a range may wrap past
    /// Sunday), `"Mon-Wed,Sat"`: English three-letter names, any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        let day = |name: &str| {
            let name = name.trim();
            NAMES
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, d)| *d)
                .ok_or_else(|| {
                    format!("{name:?} is not a day (use Mon, Tue, Wed, Thu, Fri, Sat or Sun)")
                })
        };
        let mut bits = 0u8;
        for part in text.split(',') {
            match part.split_once('-') {
                Some((from, to)) => {
                    let (mut at, to) = (day(from)?, day(to)?);
                    bits |= bit(at);
                    while at != to {
                        at = at.succ();
                        bits |= bit(at);
                    }
                }
                None => bits |= bit(day(part)?),
            }
        }
        if bits == 0 {
            return Err("no day given".into());
        }
        Ok(Self(bits))
    }

    pub fn contains(self, day: Weekday) -> bool {
        self.0 & bit(day) != 0
    }

    /// The days as ISO numbers (1 Monday to 7 Sunday), as PostgreSQL's
    /// `extract(isodow ...)` gives them.
    pub fn iso_weekdays(self) -> Vec<i32> {
        NAMES
            .iter()
            .filter(|(_, d)| self.contains(*d))
            .map(|(_, d)| i32::try_from(d.number_from_monday()).unwrap_or_default())
            .collect()
    }
}

/// `"Mon,Tue,Wed,Thu,Fri"`, or `"every day"`.
impl std::fmt::Display for Days {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Self::ALL {
            return f.write_str("every day");
        }
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(_, d)| self.contains(*d))
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join(","))
    }
}

fn bit(day: Weekday) -> u8 {
    1u8 << day.num_days_from_monday()
}

/// Why a window is closed at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosedBecause {
    /// The local day is not one of the window's days.
    Day,
    /// The local time is outside the window's hours.
    Hours,
    /// The local day is a holiday of the window's calendar.
    Holiday,
}

impl ClosedBecause {
    /// The JSON `window_closed_because`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Hours => "hours",
            Self::Holiday => "holiday",
        }
    }
}

/// The days mail may go on, and business-day stages count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenDays {
    days: Days,
    holidays: Option<Arc<Holidays>>,
}

impl Default for OpenDays {
    fn default() -> Self {
        Self {
            days: Days::ALL,
            holidays: None,
        }
    }
}

impl OpenDays {
    pub fn new(days: Days, holidays: Option<Arc<Holidays>>) -> Self {
        Self { days, holidays }
    }

    /// Every day of the week, with no holidays.
    pub fn every_day(&self) -> bool {
        self.days == Days::ALL && self.holidays.is_none()
    }

    /// Whether `date` is closed, and why: not one of the days, or a
    /// holiday.
    pub fn closed_because(&self, date: NaiveDate) -> Option<ClosedBecause> {
        if !self.days.contains(date.weekday()) {
            Some(ClosedBecause::Day)
        } else if self.holidays.as_ref().is_some_and(|h| h.contains(date)) {
            Some(ClosedBecause::Holiday)
        } else {
            None
        }
    }

    /// The days of the week it may open on.
    pub fn days(&self) -> Days {
        self.days
    }

    /// The holiday calendar, if any.
    pub fn holidays(&self) -> Option<&Holidays> {
        self.holidays.as_deref()
    }

    pub fn is_open(&self, date: NaiveDate) -> bool {
        self.days.contains(date.weekday())
            && !self.holidays.as_ref().is_some_and(|h| h.contains(date))
    }

    /// The `n`-th open day after `date` (before it for a negative `n`);
    /// `date` itself for 0, open or not.
    pub fn add(&self, date: NaiveDate, n: i64) -> NaiveDate {
        match n {
            0 => date,
            n => self.nth_open(date, n.unsigned_abs(), n > 0),
        }
    }

    /// The latest due date `d` whose `add(d, n)` is on or before `today`:
    /// for `n` > 0, the day before the `n`-th latest open day up to and
    /// including today; for `n` < 0, the `-n`-th open day after today.
    pub fn latest_due(&self, today: NaiveDate, n: i64) -> NaiveDate {
        match n {
            0 => today,
            n if n > 0 => {
                let from = today.succ_opt().unwrap_or(today);
                let nth = self.nth_open(from, n.unsigned_abs(), false);
                nth.pred_opt().unwrap_or(nth)
            }
            n => self.nth_open(today, n.unsigned_abs(), true),
        }
    }

    /// The `n`-th open day strictly after `from` (`forward`) or before it;
    /// the end of chrono's calendar if it comes first.
    fn nth_open(&self, from: NaiveDate, n: u64, forward: bool) -> NaiveDate {
        let mut left = n;
        let mut at = from;
        while left > 0 {
            let Some(next) = step(at, forward) else {
                return at;
            };
            at = next;
            if self.is_open(at) {
                left -= 1;
            }
        }
        at
    }
}

fn step(date: NaiveDate, forward: bool) -> Option<NaiveDate> {
    if forward {
        date.succ_opt()
    } else {
        date.pred_opt()
    }
}
