use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};

use super::*;
use crate::domain::{Days, Holidays};
use crate::stages::{Stage, Stages};

fn date(s: &str) -> NaiveDate {
    s.parse().unwrap_or_default()
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap_or_default()
}

fn stages(business: bool) -> Stages {
    let stage = |name: &str, days: i32| Stage {
        name: name.into(),
        days,
        template: name.into(),
        repeat_every_days: None,
        max_repeats: None,
        late_payment: false,
        letter: false,
        business_days: business,
    };
    Stages::new(vec![stage("overdue", 1), stage("final", 3)])
}

/// The step an invoice due on `due` owes on local date `day` in `group`.
fn owed(w: &LocalWindows, day: &str, group: &str, due: &str) -> Option<String> {
    let (day, due) = (date(day), date(due));
    w.windows
        .iter()
        .find(|l| {
            l.day == day
                && l.group == group
                && l.window.due_from.is_none_or(|f| f <= due)
                && due <= l.window.due_to
        })
        .map(|l| l.window.step.key.to_string())
}

#[test]
fn every_date_that_is_today_somewhere_has_its_windows() {
    // 11:30 UTC: 23:30 of the day before at UTC-12, 01:30 of the next at UTC+14.
    assert_eq!(
        local_days(at("2027-01-16T11:30:00Z")),
        [date("2027-01-15"), date("2027-01-16"), date("2027-01-17")]
    );
    let w = LocalWindows::new(
        &stages(false),
        Days::ALL,
        std::iter::empty(),
        at("2027-01-16T11:30:00Z"),
    );
    // Due 15 January: owes `overdue` on the 16th, not yet on the 15th.
    assert_eq!(owed(&w, "2027-01-15", "", "2027-01-15"), None);
    assert_eq!(
        owed(&w, "2027-01-16", "", "2027-01-15").as_deref(),
        Some("overdue")
    );
    assert_eq!(
        owed(&w, "2027-01-17", "", "2027-01-14").as_deref(),
        Some("final")
    );
    assert!(w.groups.is_empty());
    // The scans cover each step's due dates on any of the dates.
    let overdue = w.scans.iter().find(|s| s.step.key == "overdue");
    assert_eq!(
        overdue.map(|s| (s.due_from, s.due_to)),
        Some((Some(date("2027-01-13")), date("2027-01-16")))
    );
}

#[test]
fn calendars_that_count_business_days_alike_share_a_group() {
    let first = Holidays::of_days("FIRST", [date("2027-01-18")]);
    let also = Holidays::of_days("ALSO", [date("2027-01-18")]);
    let far = Holidays::of_days("FAR", [date("2027-06-01")]);
    let calendars: Vec<(String, Arc<Holidays>)> = [first, also, far]
        .into_iter()
        .map(|h| (h.name().to_owned(), Arc::new(h)))
        .collect();
    let w = LocalWindows::new(
        &stages(true),
        Days::parse("Mon-Fri").unwrap_or(Days::ALL),
        calendars.iter().map(|(n, h)| (n.as_str(), h)),
        at("2027-01-19T12:00:00Z"),
    );
    // Due Friday 15 January: one business day is Monday 18, or Tuesday 19
    // where the 18th is a holiday.
    assert_eq!(
        owed(&w, "2027-01-18", "", "2027-01-15").as_deref(),
        Some("overdue")
    );
    assert_eq!(owed(&w, "2027-01-18", "FIRST", "2027-01-15"), None);
    assert_eq!(
        owed(&w, "2027-01-19", "FIRST", "2027-01-15").as_deref(),
        Some("overdue")
    );
    assert_eq!(w.groups.get("FIRST").map(String::as_str), Some("FIRST"));
    assert_eq!(w.groups.get("ALSO").map(String::as_str), Some("FIRST"));
    assert_eq!(w.groups.get("FAR"), None);
}

/// Every due date of every scan, against every date and group: in the
/// step's sure range exactly when it owes that step in all of them.
fn assert_sure_is_what_every_set_agrees_on(w: &LocalWindows) {
    let sets: std::collections::BTreeSet<(NaiveDate, String)> =
        w.windows.iter().map(|l| (l.day, l.group.clone())).collect();
    let sure = w.sure();
    assert_eq!(sure.len(), w.scans.len());
    for (scan, sure) in w.scans.iter().zip(&sure) {
        let mut due = scan.due_from.unwrap_or(scan.due_to - chrono::Days::new(60));
        while due <= scan.due_to {
            let everywhere = sets.iter().all(|(day, group)| {
                owed(w, &day.to_string(), group, &due.to_string()).as_deref()
                    == Some(scan.step.key.as_str())
            });
            let in_sure = sure
                .as_ref()
                .is_some_and(|s| s.due_from.is_none_or(|f| f <= due) && due <= s.due_to);
            assert_eq!(in_sure, everywhere, "{} due {due}", scan.step.key);
            due = due + chrono::Days::new(1);
        }
    }
}

#[test]
fn a_due_date_is_sure_of_its_step_only_where_every_date_and_group_agree() {
    let repeating = {
        let mut s = stages(true).stages().to_vec();
        if let Some(last) = s.last_mut() {
            last.repeat_every_days = Some(2);
            last.max_repeats = Some(3);
        }
        Stages::new(s)
    };
    let bavaria = Holidays::of_days("BY", [date("2027-01-06")]);
    let calendars = [(bavaria.name().to_owned(), Arc::new(bavaria))];
    for (stages, days) in [
        (stages(false), Days::ALL),
        (stages(true), Days::parse("Mon-Fri").unwrap_or(Days::ALL)),
        (repeating, Days::parse("Mon-Fri").unwrap_or(Days::ALL)),
    ] {
        for now in [
            "2027-01-06T11:30:00Z",
            "2027-01-08T23:00:00Z",
            "2027-01-11T01:00:00Z",
        ] {
            let w = LocalWindows::new(
                &stages,
                days,
                calendars.iter().map(|(n, h)| (n.as_str(), h)),
                at(now),
            );
            assert_sure_is_what_every_set_agrees_on(&w);
        }
    }
    // One date, one group: the sure range is the scan.
    let w = LocalWindows::new(
        &stages(false),
        Days::ALL,
        std::iter::empty(),
        at("2027-01-16T12:00:00Z"),
    );
    assert!(w.sure().iter().any(Option::is_some));
}
