//! The overview's chart: the last [`DAYS`] days' reminders by outcome, as
//! stacked bars whose geometry is worked out here and drawn by the
//! template as inline SVG (no script; colours from the stylesheet's
//! classes, no inline style, so the console's CSP holds). The same numbers
//! are in a table beside it, and every bar has a `<title>`.

use std::collections::BTreeMap;

use chrono::NaiveDate;

use crate::operator::overview::DayOutcome;

/// Days the chart shows, today the last.
pub const DAYS: i32 = 30;

/// The outcomes in the order they stack, with what the page calls them:
/// a reminder's status now.
const OUTCOMES: [(&str, &str); 5] = [
    ("sent", "sent"),
    ("sending", "sending or unknown"),
    ("failed", "failed, attempts left"),
    ("discarded", "given up"),
    ("skipped", "skipped (suppressed)"),
];

/// Drawing area, in SVG user units.
const WIDTH: i64 = 600;
const HEIGHT: i64 = 160;
/// Each day's slot; its bar leaves a gap of [`GAP`].
const SLOT: i64 = WIDTH / DAYS as i64;
const GAP: i64 = 4;

#[derive(Debug, serde::Serialize)]
pub struct Chart {
    pub width: i64,
    pub height: i64,
    /// The highest day's total: the bars' full height.
    pub max: i64,
    pub total: i64,
    pub first: String,
    pub last: String,
    pub outcomes: Vec<Outcome>,
    pub days: Vec<Day>,
}

#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub status: &'static str,
    pub label: &'static str,
}

#[derive(Debug, serde::Serialize)]
pub struct Day {
    pub date: String,
    /// Reminders per outcome, in [`OUTCOMES`] order.
    pub counts: Vec<i64>,
    pub total: i64,
    pub bars: Vec<Bar>,
}

#[derive(Debug, serde::Serialize)]
pub struct Bar {
    pub status: &'static str,
    pub x: i64,
    pub y: i64,
    pub width: i64,
    pub height: i64,
    pub title: String,
}

impl Chart {
    /// The chart of `rows` (from `Desk::days`) for the days up to
    /// `today`.
    pub fn new(today: NaiveDate, rows: &[DayOutcome]) -> Self {
        let mut by_day: BTreeMap<(NaiveDate, &str), i64> = BTreeMap::new();
        for r in rows {
            let n = by_day.entry((r.day, r.status.as_str())).or_default();
            *n = n.saturating_add(r.reminders);
        }
        let dates: Vec<NaiveDate> = (0..DAYS)
            .rev()
            .filter_map(|back| {
                today.checked_sub_days(chrono::Days::new(back.unsigned_abs().into()))
            })
            .collect();
        let counts: Vec<Vec<i64>> = dates
            .iter()
            .map(|d| {
                OUTCOMES
                    .iter()
                    .map(|(s, _)| by_day.get(&(*d, *s)).copied().unwrap_or(0))
                    .collect()
            })
            .collect();
        let totals: Vec<i64> = counts
            .iter()
            .map(|c| c.iter().fold(0i64, |a, n| a.saturating_add(*n)))
            .collect();
        let max = totals.iter().copied().max().unwrap_or(0);
        let mut x = 0i64;
        let days = dates
            .iter()
            .zip(counts)
            .zip(&totals)
            .map(|((date, counts), total)| {
                let mut top = HEIGHT;
                let mut bars = Vec::new();
                for ((status, label), n) in OUTCOMES.iter().zip(&counts) {
                    if *n == 0 {
                        continue;
                    }
                    let height = scaled(*n, max).max(1);
                    top = top.saturating_sub(height);
                    bars.push(Bar {
                        status,
                        x,
                        y: top,
                        width: SLOT.saturating_sub(GAP),
                        height,
                        title: format!("{date}: {n} {label}"),
                    });
                }
                x = x.saturating_add(SLOT);
                Day {
                    date: date.to_string(),
                    counts,
                    total: *total,
                    bars,
                }
            })
            .collect();
        Self {
            width: WIDTH,
            height: HEIGHT,
            max,
            total: totals.iter().fold(0i64, |a, n| a.saturating_add(*n)),
            first: dates.first().map(ToString::to_string).unwrap_or_default(),
            last: today.to_string(),
            outcomes: OUTCOMES
                .iter()
                .map(|(status, label)| Outcome { status, label })
                .collect(),
            days,
        }
    }
}

/// `n` of `max` as a height in the drawing area, rounded down.
fn scaled(n: i64, max: i64) -> i64 {
    if max <= 0 {
        return 0;
    }
    let h = i128::from(n) * i128::from(HEIGHT) / i128::from(max);
    i64::try_from(h).unwrap_or(HEIGHT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(day: NaiveDate, status: &str, reminders: i64) -> DayOutcome {
        DayOutcome {
            day,
            status: status.into(),
            reminders,
        }
    }

    #[test]
    fn the_busiest_day_fills_the_height_and_outcomes_stack_in_order() {
        let today = NaiveDate::from_ymd_opt(2026, 12, 4).unwrap();
        let yesterday = NaiveDate::from_ymd_opt(2026, 12, 3).unwrap();
        let chart = Chart::new(
            today,
            &[
                row(today, "sent", 3),
                row(today, "failed", 1),
                row(yesterday, "sent", 2),
            ],
        );
        assert_eq!(chart.days.len(), 30);
        assert_eq!(chart.max, 4);
        assert_eq!(chart.total, 6);
        let last = chart.days.last().unwrap();
        assert_eq!(last.counts, [3, 0, 1, 0, 0]);
        let stacked: i64 = last.bars.iter().map(|b| b.height).sum();
        assert_eq!(stacked, HEIGHT);
        assert_eq!(last.bars[0].status, "sent");
        assert_eq!(last.bars[0].y, HEIGHT - 120);
        assert_eq!(chart.days[0].total, 0);
    }
}
