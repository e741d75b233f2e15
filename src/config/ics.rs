//! The holidays of an iCalendar file (RFC 5545): its all-day `VEVENT`s,
//! each a day (`DTSTART;VALUE=DATE:20270101`), a run of days (with
//! `DTEND`, the end outside, or `DURATION:P3D`), or a day every year
//! (`RRULE:FREQ=YEARLY`, with `INTERVAL`, `COUNT` or `UNTIL`) up to
//! [`LAST_YEAR`]. Folded lines are unfolded; every other component and
//! property is ignored. What cannot be a holiday (a timed event, an event
//! without a date, a rule other than yearly, a line that is not
//! `NAME:value`) is an error naming the file's line where it starts.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{Datelike, Days, NaiveDate};

/// Yearly events are expanded through this year, the built-in calendars'
/// last.
pub const LAST_YEAR: i32 = 2040;

/// A run of days longer than this (`DTEND` or `DURATION`) is a mistake.
const MAX_RUN_DAYS: u64 = 366;

/// Why a file is not a calendar, at which line (1-based, of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcsError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for IcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// The holidays of `text`.
pub fn holidays(text: &str) -> Result<BTreeSet<NaiveDate>, IcsError> {
    let mut days = BTreeSet::new();
    let mut saw_calendar = false;
    let mut event: Option<Event> = None;
    for (line, content) in unfolded(text) {
        let fail = |reason: String| IcsError { line, reason };
        let Some((head, value)) = content.split_once(':') else {
            return Err(fail(format!(
                "{content:?} is not a content line (NAME:value)"
            )));
        };
        let mut params = head.split(';');
        let name = params.next().unwrap_or_default().to_ascii_uppercase();
        let params: Vec<String> = params.map(str::to_ascii_uppercase).collect();
        match (name.as_str(), event.as_mut()) {
            ("BEGIN", _) if value.eq_ignore_ascii_case("VCALENDAR") => saw_calendar = true,
            ("BEGIN", None) if value.eq_ignore_ascii_case("VEVENT") => {
                event = Some(Event::at(line));
            }
            ("END", Some(_)) if value.eq_ignore_ascii_case("VEVENT") => {
                if let Some(e) = event.take() {
                    e.days(&mut days)?;
                }
            }
            ("DTSTART", Some(e)) => e.start = Some((line, date(value, &params).map_err(fail)?)),
            ("DTEND", Some(e)) => e.end = Some((line, date(value, &params).map_err(fail)?)),
            ("DURATION", Some(e)) => e.duration = Some((line, duration(value).map_err(fail)?)),
            ("RRULE", Some(e)) => e.yearly = Some((line, Yearly::parse(value).map_err(fail)?)),
            _ => {}
        }
    }
    if let Some(e) = event {
        return Err(IcsError {
            line: e.line,
            reason: "this VEVENT has no END:VEVENT".into(),
        });
    }
    if !saw_calendar {
        return Err(IcsError {
            line: 1,
            reason: "not an iCalendar file (no BEGIN:VCALENDAR)".into(),
        });
    }
    Ok(days)
}

/// The logical lines of `text`, each with the file's line it starts on: a
/// line that begins with a space or a tab continues the one before.
fn unfolded(text: &str) -> Vec<(usize, String)> {
    let mut lines: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        match (raw.strip_prefix([' ', '\t']), lines.last_mut()) {
            (Some(rest), Some((_, last))) => last.push_str(rest),
            _ if raw.trim().is_empty() => {}
            _ => lines.push((i.saturating_add(1), raw.to_owned())),
        }
    }
    lines
}

/// A date value: `20270101`, with `VALUE=DATE` or without; a time
/// (`20270101T090000Z`) is not a whole day.
fn date(value: &str, params: &[String]) -> Result<NaiveDate, String> {
    let value = value.trim();
    if value.contains('T') || params.iter().any(|p| p == "VALUE=DATE-TIME") {
        return Err(format!(
            "{value:?} has a time of day: a holiday is an all-day event (DTSTART;VALUE=DATE:YYYYMMDD)"
        ));
    }
    NaiveDate::parse_from_str(value, "%Y%m%d")
        .map_err(|_| format!("{value:?} is not a date (YYYYMMDD)"))
}

/// `P3D` or `P1W`: whole days.
fn duration(value: &str) -> Result<u64, String> {
    let v = value.trim().to_ascii_uppercase();
    let days = v
        .strip_prefix('P')
        .and_then(|rest| match rest.strip_suffix('W') {
            Some(weeks) => weeks.parse::<u64>().ok()?.checked_mul(7),
            None => rest.strip_suffix('D')?.parse().ok(),
        });
    days.filter(|d| (1..=MAX_RUN_DAYS).contains(d))
        .ok_or_else(|| {
            format!(
                "{value:?} is not a duration of whole days (P1D to P{MAX_RUN_DAYS}D, or weeks: P1W)"
            )
        })
}

/// `RRULE:FREQ=YEARLY`, with `INTERVAL`, `COUNT` or `UNTIL`.
#[derive(Debug, Clone, Copy)]
struct Yearly {
    interval: i32,
    count: Option<u32>,
    until: Option<NaiveDate>,
}

impl Yearly {
    fn parse(value: &str) -> Result<Self, String> {
        let mut rule = Self {
            interval: 1,
            count: None,
            until: None,
        };
        let mut yearly = false;
        for part in value.split(';') {
            let (key, v) = part.split_once('=').unwrap_or((part, ""));
            match key.to_ascii_uppercase().as_str() {
                "FREQ" => yearly = v.eq_ignore_ascii_case("YEARLY"),
                "INTERVAL" => {
                    rule.interval =
                        v.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                            format!("INTERVAL={v:?} is not a whole number of years")
                        })?;
                }
                "COUNT" => {
                    rule.count = Some(
                        v.parse()
                            .map_err(|_| format!("COUNT={v:?} is not a number"))?,
                    );
                }
                "UNTIL" => {
                    let day = v.get(..8).unwrap_or(v);
                    rule.until = Some(
                        NaiveDate::parse_from_str(day, "%Y%m%d")
                            .map_err(|_| format!("UNTIL={v:?} is not a date"))?,
                    );
                }
                // A yearly holiday on its date: nothing narrows it.
                "WKST" => {}
                _ => {
                    return Err(format!(
                        "{part:?}: only a yearly rule on the event's own date is read (RRULE:FREQ=YEARLY, with INTERVAL, COUNT or UNTIL); list moving holidays one VEVENT a year"
                    ));
                }
            }
        }
        if !yearly {
            return Err(format!(
                "{value:?}: only yearly rules are read (RRULE:FREQ=YEARLY); list other days one VEVENT each"
            ));
        }
        Ok(rule)
    }
}

/// A `VEVENT` being read: where it starts and what it said so far.
struct Event {
    line: usize,
    start: Option<(usize, NaiveDate)>,
    end: Option<(usize, NaiveDate)>,
    duration: Option<(usize, u64)>,
    yearly: Option<(usize, Yearly)>,
}

impl Event {
    fn at(line: usize) -> Self {
        Self {
            line,
            start: None,
            end: None,
            duration: None,
            yearly: None,
        }
    }

    /// Adds its days to `days`.
    fn days(self, days: &mut BTreeSet<NaiveDate>) -> Result<(), IcsError> {
        let Some((_, start)) = self.start else {
            return Err(IcsError {
                line: self.line,
                reason: "this VEVENT has no DTSTART".into(),
            });
        };
        let length = match (self.end, self.duration) {
            (Some((line, end)), _) => {
                let n = u64::try_from(end.signed_duration_since(start).num_days()).unwrap_or(0);
                if !(1..=MAX_RUN_DAYS).contains(&n) {
                    return Err(IcsError {
                        line,
                        reason: format!(
                            "DTEND {end} must be 1 to {MAX_RUN_DAYS} days after DTSTART {start} (the end day is outside the event)"
                        ),
                    });
                }
                n
            }
            (None, Some((_, n))) => n,
            (None, None) => 1,
        };
        let mut add = |first: NaiveDate| {
            for offset in 0..length {
                if let Some(day) = first.checked_add_days(Days::new(offset)) {
                    days.insert(day);
                }
            }
        };
        let Some((_, rule)) = self.yearly else {
            add(start);
            return Ok(());
        };
        // Every `interval` years on the event's own date; a year without
        // that date (29 February) has no occurrence (RFC 5545 3.3.10).
        let mut taken = 0u32;
        let mut year = start.year();
        while year <= LAST_YEAR.max(start.year()) {
            if let Some(first) = start.with_year(year) {
                if rule.until.is_some_and(|u| first > u) || rule.count.is_some_and(|c| taken >= c) {
                    break;
                }
                add(first);
                taken = taken.saturating_add(1);
            }
            year = year.saturating_add(rule.interval);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "ics_tests.rs"]
mod tests;
