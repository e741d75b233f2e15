//! The steps' windows in every customer's own day. At one instant each
//! customer's "today" is the local date of their zone, and zones run from
//! UTC-12 to UTC+14, so up to three dates are "today" somewhere: a due
//! date owes a step by the windows of its customer's date, never by the
//! worker's. Business-day stages count a customer's open days by their own
//! calendar, so their windows also differ by calendar; calendars that
//! count the same days today share one set of windows (a group). Pure: the
//! instant and the calendars are given.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

use super::{Stages, Window};
use crate::domain::{Days, Holidays, OpenDays};

/// The furthest behind UTC a zone's clock runs, with a margin.
const BEHIND: TimeDelta = TimeDelta::hours(13);
/// The furthest ahead of UTC a zone's clock runs, with a margin.
const AHEAD: TimeDelta = TimeDelta::hours(15);

/// One window of one local date and one group of calendars.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalWindow {
    pub day: NaiveDate,
    /// `""`: the calendars that count like one without holidays.
    pub group: String,
    pub window: Window,
}

/// Every step's windows for every date that is today somewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalWindows {
    pub windows: Vec<LocalWindow>,
    /// The group of each calendar (by upper-cased name) whose business
    /// days differ, today, from a calendar without holidays; a calendar
    /// not here is in group `""`.
    pub groups: BTreeMap<String, String>,
    /// Each step's due dates on any of those dates, oldest due dates first:
    /// the ranges the scans walk (a row in one is then matched to its own
    /// date's window).
    pub scans: Vec<Window>,
}

/// The dates that are today in some zone at `now`, earliest first.
pub fn local_days(now: DateTime<Utc>) -> Vec<NaiveDate> {
    let first = now.checked_sub_signed(BEHIND).unwrap_or(now).date_naive();
    let last = now.checked_add_signed(AHEAD).unwrap_or(now).date_naive();
    first.iter_days().take_while(|d| *d <= last).collect()
}

impl LocalWindows {
    /// The windows of `stages` at `now`, business-day stages counting
    /// `days` less each of `calendars`' holidays.
    pub fn new<'a>(
        stages: &Stages,
        days: Days,
        calendars: impl Iterator<Item = (&'a str, &'a Arc<Holidays>)>,
        now: DateTime<Utc>,
    ) -> Self {
        let dates = local_days(now);
        let of = |stages: &Stages| -> Vec<Vec<Window>> {
            dates.iter().map(|d| stages.windows(*d)).collect()
        };
        let plain = stages.clone().counting(OpenDays::new(days, None));
        let base = of(&plain);
        let mut sets: Vec<(String, Vec<Vec<Window>>)> = vec![(String::new(), base.clone())];
        let mut groups = BTreeMap::new();
        if stages.steps().iter().any(|s| s.business) {
            for (name, holidays) in calendars {
                let counted = stages
                    .clone()
                    .counting(OpenDays::new(days, Some(Arc::clone(holidays))));
                let windows = of(&counted);
                let group = match sets.iter().find(|(_, w)| *w == windows) {
                    Some((group, _)) => group.clone(),
                    None => {
                        sets.push((name.to_owned(), windows));
                        name.to_owned()
                    }
                };
                if !group.is_empty() {
                    groups.insert(name.to_owned(), group);
                }
            }
        }
        let mut windows = Vec::new();
        for (group, per_day) in &sets {
            for (day, ws) in dates.iter().zip(per_day) {
                windows.extend(ws.iter().map(|w| LocalWindow {
                    day: *day,
                    group: group.clone(),
                    window: w.clone(),
                }));
            }
        }
        let scans = scans(&base, &windows);
        Self {
            windows,
            groups,
            scans,
        }
    }
}

impl LocalWindows {
    /// Per scan (in [`LocalWindows::scans`]' order), the due dates that owe
    /// its step on every local date and in every group: a row due in it
    /// owes that step whatever its own date and calendar, so a listing
    /// need not work them out. None when the step's windows have no date
    /// in common, or some date or group has no window of the step.
    pub fn sure(&self) -> Vec<Option<Window>> {
        let sets: std::collections::BTreeSet<(NaiveDate, &str)> = self
            .windows
            .iter()
            .map(|l| (l.day, l.group.as_str()))
            .collect();
        self.scans
            .iter()
            .map(|scan| {
                let mine: Vec<&Window> = self
                    .windows
                    .iter()
                    .filter(|l| l.window.step.key == scan.step.key)
                    .map(|l| &l.window)
                    .collect();
                if mine.len() != sets.len() {
                    return None;
                }
                // The latest start (no start: open before), the earliest end.
                let due_from = mine.iter().filter_map(|w| w.due_from).max();
                let due_to = mine.iter().map(|w| w.due_to).min()?;
                if due_from.is_some_and(|f| f > due_to) {
                    return None;
                }
                Some(Window {
                    step: scan.step.clone(),
                    due_from,
                    due_to,
                })
            })
            .collect()
    }
}

/// Per step (in `base`'s order: oldest due dates first), the union of its
/// windows.
fn scans(base: &[Vec<Window>], all: &[LocalWindow]) -> Vec<Window> {
    let Some(order) = base.first() else {
        return Vec::new();
    };
    order
        .iter()
        .map(|w| {
            let mine = all.iter().filter(|l| l.window.step.key == w.step.key);
            let due_from = mine
                .clone()
                .map(|l| l.window.due_from)
                .min_by(|a, b| match (a, b) {
                    (None, _) => std::cmp::Ordering::Less,
                    (_, None) => std::cmp::Ordering::Greater,
                    (Some(a), Some(b)) => a.cmp(b),
                })
                .unwrap_or(w.due_from);
            let due_to = mine.map(|l| l.window.due_to).max().unwrap_or(w.due_to);
            Window {
                step: w.step.clone(),
                due_from,
                due_to,
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
