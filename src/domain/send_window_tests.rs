use chrono::{DateTime, Utc, Weekday};

use super::*;
use crate::domain::{Days, Holidays, OpenDays};

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
}

fn window(days: &str, hours: &str, tz: &str) -> SendWindow {
    with_calendar(days, hours, tz, None)
}

fn with_calendar(days: &str, hours: &str, tz: &str, calendar: Option<&str>) -> SendWindow {
    SendWindow {
        open: OpenDays::new(
            Days::parse(days).unwrap(),
            calendar
                .and_then(Holidays::built_in)
                .map(std::sync::Arc::new),
        ),
        hours: Hours::parse(hours).unwrap(),
        timezone: tz.parse().unwrap(),
    }
}

fn opens(w: &SendWindow, now: &str) -> (ClosedBecause, String) {
    match w.state_at(at(now)) {
        WindowState::Closed { because, opens } => (because, opens.to_rfc3339()),
        open => panic!("open at {now}: {open:?}"),
    }
}

fn closes(w: &SendWindow, now: &str) -> Option<String> {
    match w.state_at(at(now)) {
        WindowState::Open { closes } => closes.map(|t| t.to_rfc3339()),
        closed => panic!("closed at {now}: {closed:?}"),
    }
}

#[test]
fn days_parse_ranges_lists_and_ranges_that_wrap_past_sunday() {
    let d = Days::parse("Mon-Fri").unwrap();
    assert!(d.contains(Weekday::Mon) && d.contains(Weekday::Fri));
    assert!(!d.contains(Weekday::Sat) && !d.contains(Weekday::Sun));
    let d = Days::parse("mon, Wed ,FRI").unwrap();
    assert!(d.contains(Weekday::Wed) && !d.contains(Weekday::Tue));
    let d = Days::parse("Fri-Mon").unwrap();
    assert!(d.contains(Weekday::Sun) && d.contains(Weekday::Mon) && !d.contains(Weekday::Tue));
    assert_eq!(Days::parse("Mon-Sun").unwrap(), Days::ALL);
    for bad in ["", "Monday", "Mon-", "Mon;Tue", "Mo-Fr"] {
        assert!(Days::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn hours_parse_a_start_before_an_end_and_refuse_anything_else() {
    assert_eq!(Hours::parse("00:00-24:00").unwrap(), Hours::ALL_DAY);
    assert_eq!(
        Hours::parse("09:00-17:30").unwrap().to_string(),
        "09:00-17:30"
    );
    for bad in [
        "9-17",
        "09:00",
        "17:00-09:00",
        "09:00-09:00",
        "24:00-24:00",
        "09:60-10:00",
        "9:00-17:00",
        "25:00-26:00",
        "-",
    ] {
        assert!(Hours::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_start_is_inside_the_window_and_the_end_outside() {
    let w = window("Mon-Fri", "09:00-17:00", "Europe/Berlin");
    // Monday 11 January 2027, CET (+01:00).
    assert_eq!(
        opens(&w, "2027-01-11T07:59:59Z"),
        (ClosedBecause::Hours, "2027-01-11T09:00:00+01:00".into())
    );
    assert_eq!(
        closes(&w, "2027-01-11T08:00:00Z"),
        Some("2027-01-11T16:00:00+00:00".into())
    );
    assert_eq!(
        closes(&w, "2027-01-11T15:59:59Z"),
        Some("2027-01-11T16:00:00+00:00".into())
    );
    assert_eq!(
        opens(&w, "2027-01-11T16:00:00Z"),
        (ClosedBecause::Hours, "2027-01-12T09:00:00+01:00".into())
    );
}

#[test]
fn a_weekend_is_closed_by_its_day_and_opens_on_monday_morning() {
    let w = window("Mon-Fri", "09:00-17:00", "Europe/Berlin");
    // Saturday 9 January 2027, noon in Berlin; Friday evening after the end.
    assert_eq!(
        opens(&w, "2027-01-09T11:00:00Z"),
        (ClosedBecause::Day, "2027-01-11T09:00:00+01:00".into())
    );
    assert_eq!(
        opens(&w, "2027-01-08T17:00:00Z"),
        (ClosedBecause::Hours, "2027-01-11T09:00:00+01:00".into())
    );
}

#[test]
fn nine_oclock_is_nine_local_on_both_sides_of_a_change() {
    let w = window("Mon-Sun", "09:00-17:00", "Europe/Berlin");
    // Sunday 28 March 2027 is the spring change in the EU: 08:00 UTC is
    // 10:00 CEST, and the day before 09:00 was 08:00 UTC.
    assert_eq!(
        opens(&w, "2027-03-27T07:30:00Z"),
        (ClosedBecause::Hours, "2027-03-27T09:00:00+01:00".into())
    );
    assert_eq!(
        opens(&w, "2027-03-28T06:30:00Z"),
        (ClosedBecause::Hours, "2027-03-28T09:00:00+02:00".into())
    );
    assert_eq!(
        closes(&w, "2027-03-28T07:00:00Z"),
        Some("2027-03-28T15:00:00+00:00".into())
    );
    // Sunday 31 October 2027, back to CET: 09:00 is 08:00 UTC again.
    assert_eq!(
        opens(&w, "2027-10-31T07:30:00Z"),
        (ClosedBecause::Hours, "2027-10-31T09:00:00+01:00".into())
    );
}

#[test]
fn a_start_in_a_spring_forward_gap_opens_at_the_first_instant_after_it() {
    // 02:30 does not exist in Berlin on 28 March 2027: 02:00 CET is 03:00 CEST.
    let w = window("Mon-Sun", "02:30-05:00", "Europe/Berlin");
    assert_eq!(
        opens(&w, "2027-03-28T00:30:00Z"),
        (ClosedBecause::Hours, "2027-03-28T03:00:00+02:00".into())
    );
    assert_eq!(
        closes(&w, "2027-03-28T01:00:00Z"),
        Some("2027-03-28T03:00:00+00:00".into())
    );
}

#[test]
fn a_window_open_all_day_on_every_day_never_closes_and_midnight_joins_open_days() {
    let all = window("Mon-Sun", "00:00-24:00", "UTC");
    assert!(all.always_open());
    assert_eq!(closes(&all, "2027-01-11T12:00:00Z"), None);
    // All day Monday to Friday: open on Wednesday until Saturday 00:00.
    let weekdays = window("Mon-Fri", "00:00-24:00", "Pacific/Kiritimati");
    assert!(!weekdays.always_open());
    assert_eq!(
        closes(&weekdays, "2027-01-12T22:00:00Z"),
        Some("2027-01-15T10:00:00+00:00".into())
    );
}

#[test]
fn far_zones_decide_on_their_own_wall_clock() {
    let now = "2027-01-11T20:00:00Z";
    // Monday 20:00 UTC is Tuesday 10:00 in Kiritimati (+14) and Monday
    // 10:00 in Honolulu (-10): both inside 09:00-17:00 on their own day.
    for tz in ["Pacific/Kiritimati", "Pacific/Honolulu"] {
        let w = window("Mon-Fri", "09:00-17:00", tz);
        assert!(closes(&w, now).is_some(), "{tz}");
    }
    // Friday 20:00 UTC is Saturday in Kiritimati: closed by its day.
    let w = window("Mon-Fri", "09:00-17:00", "Pacific/Kiritimati");
    assert_eq!(
        opens(&w, "2027-01-15T20:00:00Z"),
        (ClosedBecause::Day, "2027-01-18T09:00:00+14:00".into())
    );
}

#[test]
fn a_holiday_closes_the_whole_local_day_and_the_window_opens_on_the_next_open_day() {
    let w = with_calendar("Mon-Fri", "09:00-17:00", "Europe/Berlin", Some("DE-BY"));
    assert!(!w.always_open());
    // Wednesday 6 January 2027, Epiphany in Bavaria, at 10:00.
    assert_eq!(
        opens(&w, "2027-01-06T09:00:00Z"),
        (ClosedBecause::Holiday, "2027-01-07T09:00:00+01:00".into())
    );
    // Thursday 25 March 2027 after hours: Good Friday and Easter Monday
    // close the days around the weekend; Tuesday 30 March opens.
    assert_eq!(
        opens(&w, "2027-03-25T17:00:00Z"),
        (ClosedBecause::Hours, "2027-03-30T09:00:00+02:00".into())
    );
    // All day on weekdays: open on Thursday 24 December until the
    // holidays begin.
    let all_day = with_calendar("Mon-Fri", "00:00-24:00", "Europe/Berlin", Some("DE-BY"));
    assert_eq!(
        closes(&all_day, "2027-12-23T12:00:00Z"),
        Some("2027-12-24T23:00:00+00:00".into())
    );
}
