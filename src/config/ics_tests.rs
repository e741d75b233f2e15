use super::*;

fn d(s: &str) -> NaiveDate {
    s.parse().unwrap()
}

fn calendar(events: &str) -> String {
    format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Example//Holidays//EN\r\n{events}END:VCALENDAR\r\n"
    )
}

#[test]
fn all_day_events_runs_and_yearly_rules_are_holidays() {
    let text = calendar(concat!(
        "BEGIN:VEVENT\r\nUID:1\r\nDTSTART;VALUE=DATE:20270315\r\nSUMMARY:Founders' day\r\nEND:VEVENT\r\n",
        "BEGIN:VEVENT\r\nUID:2\r\nDTSTART;VALUE=DATE:20270802\r\nDTEND;VALUE=DATE:20270805\r\nEND:VEVENT\r\n",
        "BEGIN:VEVENT\r\nUID:3\r\nDTSTART:20271227\r\nDURATION:P2D\r\nEND:VEVENT\r\n",
        "BEGIN:VEVENT\r\nUID:4\r\nDTSTART;VALUE=DATE:20261224\r\nRRULE:FREQ=YEARLY;COUNT=3\r\nEND:VEVENT\r\n",
    ));
    let days = holidays(&text).unwrap();
    let want = [
        "2026-12-24",
        "2027-03-15",
        "2027-08-02",
        "2027-08-03",
        "2027-08-04",
        "2027-12-24",
        "2027-12-27",
        "2027-12-28",
        "2028-12-24",
    ];
    assert_eq!(
        days.iter().map(ToString::to_string).collect::<Vec<_>>(),
        want
    );
}

#[test]
fn a_yearly_rule_runs_through_the_last_year_and_skips_a_missing_29_february() {
    let text = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20280229\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n",
    );
    let days = holidays(&text).unwrap();
    assert!(days.contains(&d("2028-02-29")) && days.contains(&d("2032-02-29")));
    assert!(!days.contains(&d("2029-02-28")) && !days.contains(&d("2029-03-01")));
    assert_eq!(days.last(), Some(&d("2040-02-29")));
    let until = calendar(
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\nRRULE:FREQ=YEARLY;INTERVAL=2;UNTIL=20311231\r\nEND:VEVENT\r\n",
    );
    let days = holidays(&until).unwrap();
    assert_eq!(
        days.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["2027-01-01", "2029-01-01", "2031-01-01"]
    );
}

#[test]
fn folded_lines_and_other_components_are_read_as_the_rfc_says() {
    let text = concat!(
        "BEGIN:VCALENDAR\n",
        "BEGIN:VTIMEZONE\nTZID:Europe/Berlin\nBEGIN:STANDARD\nDTSTART:19701025T030000\nEND:STANDARD\nEND:VTIMEZONE\n",
        "BEGIN:VEVENT\nSUMMARY:A very long summary that an editor\n  folded onto the next line\nDTSTART;VALUE=DATE:2027\n 0101\n",
        "BEGIN:VALARM\nTRIGGER:-PT15M\nEND:VALARM\nEND:VEVENT\n",
        "END:VCALENDAR\n",
    );
    let days = holidays(text).unwrap();
    assert_eq!(days.into_iter().collect::<Vec<_>>(), [d("2027-01-01")]);
}

#[test]
fn what_cannot_be_a_holiday_is_refused_at_its_line() {
    let cases = [
        // A timed event: line 5.
        (
            "BEGIN:VEVENT\r\nDTSTART:20270101T090000Z\r\nEND:VEVENT\r\n",
            5,
            "all-day",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:2027-01-01\r\nEND:VEVENT\r\n",
            5,
            "not a date",
        ),
        (
            "BEGIN:VEVENT\r\nSUMMARY:x\r\nEND:VEVENT\r\n",
            4,
            "no DTSTART",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\n",
            4,
            "no END:VEVENT",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\nRRULE:FREQ=WEEKLY\r\nEND:VEVENT\r\n",
            6,
            "yearly",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\nRRULE:FREQ=YEARLY;BYMONTH=1\r\nEND:VEVENT\r\n",
            6,
            "BYMONTH",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270105\r\nDTEND;VALUE=DATE:20270101\r\nEND:VEVENT\r\n",
            6,
            "DTEND",
        ),
        (
            "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\nDURATION:PT1H\r\nEND:VEVENT\r\n",
            6,
            "whole days",
        ),
        ("just text\r\n", 4, "content line"),
    ];
    for (events, line, says) in cases {
        let e = holidays(&calendar(events)).unwrap_err();
        assert_eq!(e.line, line, "{events:?}: {e}");
        assert!(e.to_string().contains(says), "{events:?}: {e}");
    }
    let e = holidays("DTSTART;VALUE=DATE:20270101\n").unwrap_err();
    assert!(e.to_string().contains("BEGIN:VCALENDAR"), "{e}");
}

#[test]
fn any_input_is_an_answer_never_a_panic() {
    for text in [
        "",
        ":",
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:99991231\nRRULE:FREQ=YEARLY;INTERVAL=2147483647\nEND:VEVENT\n",
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20270101\nDURATION:P99999999999999999999D\nEND:VEVENT\n",
        " folded first\n\t\n",
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20270101\nRRULE:FREQ=YEARLY;COUNT=0\nEND:VEVENT\n",
    ] {
        let _ = holidays(text);
    }
}
