//! The reminder period: the key that makes "one reminder per invoice and
//! period" a database constraint.
//!
//! Computed in pure code from a date, and that date always comes from the
//! DATABASE clock in the configured time zone (`db::clock::today`), never
//! from the replica's clock: replicas with skewed clocks must still agree on
//! the key, or the UNIQUE (invoice_id, period) constraint could not catch a
//! second sender around midnight.

use chrono::{Datelike, NaiveDate};

use crate::config::Cadence;

/// `2026-11-30` (daily), `2026-W49` (weekly, ISO 8601 week-numbering year),
/// `2026-11` (monthly).
pub fn period_key(today: NaiveDate, cadence: Cadence) -> String {
    match cadence {
        Cadence::Daily => today.format("%Y-%m-%d").to_string(),
        Cadence::Weekly => {
            let week = today.iso_week();
            format!("{}-W{:02}", week.year(), week.week())
        }
        Cadence::Monthly => today.format("%Y-%m").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).expect("valid test date")
    }

    #[test]
    fn daily_periods_are_the_date() {
        assert_eq!(period_key(date(2026, 11, 30), Cadence::Daily), "2026-11-30");
    }

    #[test]
    fn weekly_periods_use_the_iso_week() {
        assert_eq!(period_key(date(2026, 11, 30), Cadence::Weekly), "2026-W49");
        assert_eq!(period_key(date(2026, 1, 5), Cadence::Weekly), "2026-W02");
    }

    #[test]
    fn weekly_periods_use_the_iso_year_at_year_boundaries() {
        // 2027-01-01 is a Friday: it belongs to 2026's last ISO week.
        assert_eq!(period_key(date(2027, 1, 1), Cadence::Weekly), "2026-W53");
        // 2024-12-30 is a Monday: ISO week 1 of 2025.
        assert_eq!(period_key(date(2024, 12, 30), Cadence::Weekly), "2025-W01");
    }

    #[test]
    fn monthly_periods_are_year_and_month() {
        assert_eq!(period_key(date(2026, 11, 30), Cadence::Monthly), "2026-11");
        assert_eq!(period_key(date(2026, 1, 1), Cadence::Monthly), "2026-01");
    }
}
