//! The send window: the local days and hours in which mail may be handed
//! to the relay (`[send_window]`). Guarantees: whether the window is open
//! is decided on the wall clock of its zone, so "09:00" is 09:00 local on
//! both sides of a daylight-saving change; a start that falls in a
//! spring-forward gap opens at the first instant after the gap; the start
//! is inside the window and the end outside; a holiday of its calendar
//! closes the whole local day. Pure: the instant is given (the database
//! clock's), never read here.

use chrono::{DateTime, LocalResult, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use super::open_days::{ClosedBecause, OpenDays};

/// Minutes in a day: the end of an all-day window.
const DAY_MINUTES: u16 = 1440;

/// The local hours a window is open on its days: from `start` (inside) to
/// `end` (outside), minutes after midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hours {
    start: u16,
    end: u16,
}

impl Hours {
    /// All day.
    pub const ALL_DAY: Self = Self {
        start: 0,
        end: DAY_MINUTES,
    };

    /// `"09:00-17:00"`; `"00:00-24:00"` is all day. The start must be
    /// before the end (a window does not run past midnight).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (start, end) = text
            .split_once('-')
            .ok_or_else(|| format!("{text:?} is not a range of hours such as \"09:00-17:00\""))?;
        let (start, end) = (minutes(start)?, minutes(end)?);
        if start >= end {
            return Err(format!(
                "{text:?} starts at or after its end (a window ends on the day it starts; use \"00:00-24:00\" for all day)"
            ));
        }
        Ok(Self { start, end })
    }

    /// The start (inside) and the end (outside), in minutes after local
    /// midnight; an all-day window ends at 1440.
    pub fn minutes(self) -> (u16, u16) {
        (self.start, self.end)
    }
}

impl std::fmt::Display for Hours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{}-{}", hm(self.start), hm(self.end))
    }
}

/// `"HH:MM"` as minutes after midnight, `"24:00"` included.
fn minutes(text: &str) -> Result<u16, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a time such as \"09:00\" (00:00 to 24:00)");
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) => Ok(DAY_MINUTES),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

/// A window at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// Open; it closes at `closes` (None: never, every day all day).
    Open { closes: Option<DateTime<Utc>> },
    /// Closed; it next opens at `opens`, on the zone's clock.
    Closed {
        because: ClosedBecause,
        opens: DateTime<Tz>,
    },
}

/// The days mail may go (its days, not its calendar's holidays) and the
/// hours, on the clock of `timezone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWindow {
    pub open: OpenDays,
    pub hours: Hours,
    pub timezone: Tz,
}

/// How many days ahead an opening is looked for: a week of closed days
/// plus the longest run of holidays a calendar has.
const LOOK_AHEAD_DAYS: u64 = 31;

impl SendWindow {
    /// Open every day, all day, with no holidays: no window at all.
    pub fn always_open(&self) -> bool {
        self.open.every_day() && self.hours == Hours::ALL_DAY
    }

    /// Whether the window is open at `now`, and until or from when.
    pub fn state_at(&self, now: DateTime<Utc>) -> WindowState {
        let local = now.with_timezone(&self.timezone);
        let date = local.date_naive();
        let minute = u16::try_from(local.hour() * 60 + local.minute()).unwrap_or(DAY_MINUTES);
        if let Some(because) = self.open.closed_because(date) {
            return self.closed(because, now, date);
        }
        if minute < self.hours.start || minute >= self.hours.end {
            return self.closed(ClosedBecause::Hours, now, date);
        }
        WindowState::Open {
            closes: self.close_after(date),
        }
    }

    fn closed(&self, because: ClosedBecause, now: DateTime<Utc>, date: NaiveDate) -> WindowState {
        // Within a week and the longest run of holidays the window opens
        // again (a day of the week is always among its days); the last
        // resort is never met.
        let opens = (0..=LOOK_AHEAD_DAYS)
            .filter_map(|k| date.checked_add_days(chrono::Days::new(k)))
            .filter(|d| self.open.is_open(*d))
            .filter_map(|d| self.instant(d, self.hours.start))
            .find(|at| at.with_timezone(&Utc) > now)
            .unwrap_or_else(|| now.with_timezone(&self.timezone));
        WindowState::Closed { because, opens }
    }

    /// When the window open on `date` closes: its end that day, or, for
    /// an end at midnight followed by a day that opens at midnight, that
    /// day's end; None if it never closes.
    fn close_after(&self, date: NaiveDate) -> Option<DateTime<Utc>> {
        let mut day = date;
        for _ in 0..LOOK_AHEAD_DAYS {
            if self.hours.end < DAY_MINUTES {
                return self
                    .instant(day, self.hours.end)
                    .map(|t| t.with_timezone(&Utc));
            }
            let next = day.succ_opt()?;
            if self.hours.start > 0 || !self.open.is_open(next) {
                return self.instant(next, 0).map(|t| t.with_timezone(&Utc));
            }
            day = next;
        }
        None
    }

    /// The first instant whose wall time on `date` is `minute` or later:
    /// the earlier of a repeated time, the end of a skipped one.
    fn instant(&self, date: NaiveDate, minute: u16) -> Option<DateTime<Tz>> {
        let (date, minute) = if minute >= DAY_MINUTES {
            (date.succ_opt()?, 0)
        } else {
            (date, minute)
        };
        let mut at = date.and_time(NaiveTime::from_hms_opt(
            u32::from(minute / 60),
            u32::from(minute % 60),
            0,
        )?);
        // A gap is at most a day long (Samoa, 2011).
        for _ in 0..=DAY_MINUTES {
            match self.timezone.from_local_datetime(&at) {
                LocalResult::Single(t) => return Some(t),
                LocalResult::Ambiguous(early, _) => return Some(early),
                LocalResult::None => at = at.checked_add_signed(chrono::TimeDelta::minutes(1))?,
            }
        }
        None
    }
}

#[cfg(test)]
#[path = "send_window_tests.rs"]
mod tests;
