use super::*;
use crate::domain::{Days, Holidays};

fn stage(name: &str, days: i32, repeat: Option<(u32, u32)>) -> Stage {
    Stage {
        name: name.into(),
        days,
        template: name.into(),
        repeat_every_days: repeat.map(|r| r.0),
        max_repeats: repeat.map(|r| r.1),
        late_payment: false,
        letter: false,
        business_days: false,
    }
}

fn defaults() -> Stages {
    Stages::new(vec![
        stage("upcoming", -3, None),
        stage("overdue", 3, None),
        stage("final", 21, Some((14, 2))),
    ])
}

/// The due step of an invoice `age` days past its due date.
fn key(stages: &Stages, age: i64) -> Option<String> {
    let today = date("2026-11-30");
    stages
        .due_step(shift(today, -age), today)
        .map(|s| s.key.to_string())
}

fn date(s: &str) -> NaiveDate {
    s.parse().unwrap_or_default()
}

/// Stages counting business days on `days`, with `calendar`'s holidays.
fn business(list: &[(&str, i32)], days: &str, calendar: Option<&str>) -> Stages {
    let stages = list
        .iter()
        .map(|(name, d)| Stage {
            business_days: true,
            ..stage(name, *d, None)
        })
        .collect();
    let holidays = calendar
        .and_then(Holidays::built_in)
        .map(std::sync::Arc::new);
    let open = OpenDays::new(Days::parse(days).unwrap_or(Days::ALL), holidays);
    Stages::new(stages).counting(open)
}

/// The windows of `stages` today agree with each due date's due step.
fn windows_agree(stages: &Stages, today: NaiveDate) {
    let windows = stages.windows(today);
    for back in -30..120 {
        let due = shift(today, -back);
        let inside: Vec<&str> = windows
            .iter()
            .filter(|w| w.due_from.is_none_or(|f| f <= due) && due <= w.due_to)
            .map(|w| w.step.key.as_str())
            .collect();
        let expected: Vec<&str> = stages
            .due_step(due, today)
            .map(|s| s.key.as_str())
            .into_iter()
            .collect();
        assert_eq!(inside, expected, "due {due}, today {today}");
    }
}

#[test]
fn the_due_step_is_the_latest_occurrence_on_or_before_today() {
    let s = defaults();
    assert_eq!(key(&s, -4), None);
    assert_eq!(key(&s, -3).as_deref(), Some("upcoming"));
    assert_eq!(key(&s, 2).as_deref(), Some("upcoming"));
    assert_eq!(key(&s, 3).as_deref(), Some("overdue"));
    assert_eq!(key(&s, 20).as_deref(), Some("overdue"));
    assert_eq!(key(&s, 21).as_deref(), Some("final"));
    assert_eq!(key(&s, 34).as_deref(), Some("final"));
    assert_eq!(key(&s, 35).as_deref(), Some("final-2"));
    assert_eq!(key(&s, 40).as_deref(), Some("final-2"));
    assert_eq!(key(&s, 49).as_deref(), Some("final-3"));
    assert_eq!(key(&s, 5000).as_deref(), Some("final-3"));
}

#[test]
fn repeats_are_numbered_from_two() {
    let s = defaults();
    let step = s.step("final-3").cloned();
    assert_eq!(
        step.map(|s| (s.stage, s.occurrence, s.offset)),
        Some((2, 3, 49))
    );
    assert_eq!(s.step("final-4"), None);
}

#[test]
fn windows_cover_every_due_date_once_and_agree_with_the_due_step() {
    let s = defaults();
    let today = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default();
    let windows = s.windows(today);
    assert_eq!(windows.first().map(|w| w.due_from), Some(None));
    for age in -10..80 {
        let due = shift(today, -age);
        let inside: Vec<&str> = windows
            .iter()
            .filter(|w| w.due_from.is_none_or(|f| f <= due) && due <= w.due_to)
            .map(|w| w.step.key.as_str())
            .collect();
        let expected: Vec<String> = key(&s, age).into_iter().collect();
        assert_eq!(inside, expected, "age {age}");
    }
    // Oldest due dates first.
    assert!(windows.windows(2).all(|p| p[0].due_to < p[1].due_to));
}

#[test]
fn bad_stage_lists_are_refused_with_the_field() {
    let refused = |list: Vec<Stage>| check(&list).err().map(|(i, f, _)| (i, f));
    assert_eq!(refused(vec![]), Some((None, "")));
    assert_eq!(
        refused(vec![stage("a", 1, None), stage("a", 2, None)]),
        Some((Some(1), "name"))
    );
    assert_eq!(
        refused(vec![stage("final-2", 1, None)]),
        Some((Some(0), "name"))
    );
    assert_eq!(
        refused(vec![stage("a b", 1, None)]),
        Some((Some(0), "name"))
    );
    assert_eq!(
        refused(vec![stage("a", 5, None), stage("b", 5, None)]),
        Some((Some(1), "days"))
    );
    assert_eq!(
        refused(vec![stage("a", 1, Some((7, 2))), stage("b", 9, None)]),
        Some((Some(0), "repeat_every_days"))
    );
    let mut half = stage("a", 1, None);
    half.max_repeats = Some(2);
    assert_eq!(refused(vec![half]), Some((Some(0), "repeat_every_days")));
    assert_eq!(check(&[stage("x-y", 1, Some((1, 1)))]), Ok(()));
}

#[test]
fn business_days_skip_the_weekend_and_the_customers_holidays() {
    // Due Friday 15 January 2027, days Mon-Fri.
    let due = date("2027-01-15");
    let s = business(&[("one", 1), ("three", 3)], "Mon-Fri", None);
    let dates: Vec<NaiveDate> = s.steps().iter().map(|st| s.date_of(st, due)).collect();
    assert_eq!(dates, [date("2027-01-18"), date("2027-01-20")]);
    // Monday 18 closed by the calendar (Martin Luther King Jr. Day in the
    // US): Tuesday 19 and Thursday 21.
    let s = business(&[("one", 1), ("three", 3)], "Mon-Fri", Some("US"));
    let dates: Vec<NaiveDate> = s.steps().iter().map(|st| s.date_of(st, due)).collect();
    assert_eq!(dates, [date("2027-01-19"), date("2027-01-21")]);
    // Epiphany in Bavaria, Wednesday 6 January.
    let s = business(&[("one", 1), ("three", 3)], "Mon-Fri", Some("DE-BY"));
    let due = date("2027-01-05");
    let dates: Vec<NaiveDate> = s.steps().iter().map(|st| s.date_of(st, due)).collect();
    assert_eq!(dates, [date("2027-01-07"), date("2027-01-11")]);
    // Easter: due Thursday 25 March 2027, Good Friday and Easter Monday
    // closed in Germany: 1 business day is Tuesday 30 March.
    let s = business(&[("one", 1)], "Mon-Fri", Some("DE"));
    assert_eq!(
        s.date_of(&s.steps()[0], date("2027-03-25")),
        date("2027-03-30")
    );
}

#[test]
fn the_due_step_in_business_days_waits_over_the_weekend() {
    let s = business(&[("one", 1), ("three", 3)], "Mon-Fri", None);
    let due = date("2027-01-15");
    let step = |today: &str| s.due_step(due, date(today)).map(|st| st.key.to_string());
    assert_eq!(step("2027-01-16"), None);
    assert_eq!(step("2027-01-17"), None);
    assert_eq!(step("2027-01-18").as_deref(), Some("one"));
    assert_eq!(step("2027-01-19").as_deref(), Some("one"));
    assert_eq!(step("2027-01-20").as_deref(), Some("three"));
}

#[test]
fn windows_agree_with_the_due_step_in_business_days_and_mixed_with_calendar_days() {
    let mut mixed = vec![stage("before", -2, None), stage("after", 2, None)];
    mixed[0].business_days = true;
    mixed.push(Stage {
        business_days: true,
        ..stage("final", 5, Some((3, 4)))
    });
    let holidays = Holidays::built_in("DE").map(std::sync::Arc::new);
    let mixed = Stages::new(mixed).counting(OpenDays::new(
        Days::parse("Mon-Fri").unwrap_or(Days::ALL),
        holidays,
    ));
    let plain = business(
        &[("one", 1), ("three", 3), ("ten", 10)],
        "Mon,Wed,Fri",
        Some("DE-BY"),
    );
    // Every day around Easter and Christmas 2027.
    for start in ["2027-03-20", "2027-12-20"] {
        for k in 0..16 {
            let today = shift(date(start), k);
            windows_agree(&mixed, today);
            windows_agree(&plain, today);
        }
    }
}
