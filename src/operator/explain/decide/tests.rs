//! Edge cases of the decision, over facts built by hand. The integration
//! tests (tests/worker/explain.rs) set each reason up in a real database.

use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};

use super::*;
use crate::db::source_row::SourceRow;
use crate::domain::ReminderId;
use crate::stages::Stage;

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

/// The default stages: upcoming -3, overdue 3, final 21 (+14, +28).
pub(super) fn stages() -> Stages {
    Stages::new(vec![
        stage("upcoming", -3, None),
        stage("overdue", 3, None),
        stage("final", 21, Some((14, 2))),
    ])
}

pub(super) fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default()
}

pub(super) fn days_ago(n: u64) -> NaiveDate {
    today().checked_sub_days(Days::new(n)).unwrap_or_default()
}

pub(super) fn days_ahead(n: u64) -> NaiveDate {
    today().checked_add_days(Days::new(n)).unwrap_or_default()
}

pub(super) fn noon(d: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&d.and_hms_opt(12, 0, 0).unwrap_or_default())
}

/// One clean, unpaid, unpaused row due `age` days ago.
pub(super) fn source(age: u64) -> SourceFacts {
    SourceFacts {
        row: SourceRow {
            invoice_id: Some(InvoiceId::from("7")),
            number: Some("INV-7".into()),
            amount_minor: Some(100),
            currency: Some("EUR".into()),
            due_date: Some(days_ago(age)),
            customer_email: Some("a@example.test".into()),
            ..SourceRow::default()
        },
        is_paid: Some(false),
        paused: Some(false),
        paused_until: None,
        flags_owe: true,
        copies: 1,
    }
}

/// A row of `step` in `status`, created `age` days ago, its run over.
fn row(step: &str, status: &str, age: u64) -> ReminderFacts {
    let at = noon(days_ago(age));
    ReminderFacts {
        id: ReminderId(1),
        invoice_id: InvoiceId::from(1),
        step: step.into(),
        status: status.into(),
        attempts: i32::from(status != "sending"),
        last_error: None,
        created_at: at,
        claimed_on: days_ago(age),
        continued: false,
        claimed_at: at,
        started_at: Some(at),
        last_attempt_at: Some(at),
        sent_at: (status == "sent").then_some(at),
        run_id: Some(3),
        replica: Some("worker-1".into()),
        message_id: None,
        smtp_reply: None,
        message_sha256: None,
        run_ended: true,
        run_gone: true,
        backoff_over: true,
        retry_at: Some(at),
        retry_on: Some(days_ago(age)),
    }
}

pub(super) fn decided(sources: Vec<SourceFacts>, reminders: Vec<ReminderFacts>) -> Explained {
    decided_in(sources, reminders, None)
}

/// Invoice 7's facts today, with nothing suppressed or paused.
pub(super) fn facts(sources: Vec<SourceFacts>, reminders: Vec<ReminderFacts>) -> Facts {
    Facts {
        invoice_id: InvoiceId::from("7"),
        today: today(),
        timezone: "UTC".into(),
        sources,
        reminders,
        suppressed: Vec::new(),
        all_suppressed: false,
        customer_last: None,
        customer_place: None,
        console_pause: None,
        payment_holds: Vec::new(),
    }
}

fn decided_in(
    sources: Vec<SourceFacts>,
    reminders: Vec<ReminderFacts>,
    customer_place: Option<CustomerPlace>,
) -> Explained {
    let stages = stages();
    decide(
        Facts {
            customer_place,
            ..facts(sources, reminders)
        },
        Rules {
            stages: &stages,
            min_days_between: 2,
            max_attempts: 5,
            late_payment: &late_payment(),
        },
    )
}

pub(super) fn next(e: &Explained) -> Option<(&str, NaiveDate)> {
    Some((e.next_step.as_ref()?.as_str(), e.next_date?))
}

#[test]
fn a_key_on_several_rows_is_a_repeated_key_with_no_row_shown() {
    let mut a = source(10);
    a.copies = 2;
    let e = decided(vec![a.clone(), a], vec![]);
    assert_eq!(e.reason, Reason::SourceProblem);
    assert_eq!(e.source_problem, Some(Unusable::Row(Problem::RepeatedKey)));
    assert_eq!((&e.source, e.source_rows), (&None, 2));
    assert_eq!(next(&e), None);
}

#[test]
fn reminder_rows_without_a_source_row_are_known_but_not_in_source() {
    let e = decided(vec![], vec![row("overdue", "sent", 5)]);
    assert_eq!(e.source_problem, Some(Unusable::NotInSource));
    assert!(e.is_known());
    assert!(!decided(vec![], vec![]).is_known());
}

#[test]
fn a_null_is_paid_counts_as_paid() {
    let mut s = source(10);
    (s.is_paid, s.flags_owe) = (None, false);
    let e = decided(vec![s], vec![]);
    assert_eq!((e.reason, e.paid), (Reason::Paid, Some(true)));
    assert!(e.reason_detail.contains("NULL"), "{}", e.reason_detail);
}

#[test]
fn the_pause_flag_has_no_end_and_nothing_next() {
    let mut s = source(10);
    (s.paused, s.flags_owe) = (Some(true), false);
    s.paused_until = Some(days_ahead(3));
    let e = decided(vec![s], vec![]);
    assert_eq!((e.reason, e.until), (Reason::Paused, None));
    assert_eq!(next(&e), None);
}

#[test]
fn a_first_claim_its_run_never_started_is_sent_today_not_held_by_the_gap() {
    let mut claimed = row("overdue", "sending", 0);
    claimed.started_at = None;
    let e = decided(vec![source(10)], vec![claimed]);
    assert_eq!(e.reason, Reason::WillSendToday);
    assert_eq!(
        e.reminders.first().map(|r| r.state),
        Some(RowState::Returning)
    );
    assert_eq!(next(&e), Some(("overdue", today())));
}

#[test]
fn a_claim_in_flight_is_being_sent_today() {
    let mut flying = row("overdue", "sending", 0);
    flying.run_ended = false;
    let e = decided(vec![source(10)], vec![flying]);
    assert_eq!(e.reason, Reason::WillSendToday);
    assert!(
        e.reason_detail.contains("being sent now"),
        "{}",
        e.reason_detail
    );
    assert_eq!(next(&e), Some(("overdue", today())));
}

#[test]
fn a_retry_whose_backoff_ends_after_its_step_gives_way_to_the_next_step() {
    // Due 20 days ago: `overdue` is due until tomorrow, `final` from then on.
    let mut failed = row("overdue", "failed", 0);
    failed.backoff_over = false;
    failed.retry_at = Some(noon(days_ahead(5)));
    failed.retry_on = Some(days_ahead(5));
    let e = decided(vec![source(20)], vec![failed]);
    assert_eq!(e.reason, Reason::BackoffUntil);
    assert_eq!(e.until, Some(Until::Time(noon(days_ahead(5)))));
    assert_eq!(next(&e), Some(("final", days_ahead(1))));
}

#[test]
fn every_remaining_step_sent_is_no_more_steps_even_before_the_last_date() {
    // Due 40 days ago: final-2 is due; final-3 (day 49) already has a row.
    let rows = vec![row("final-2", "sent", 3), row("final-3", "discarded", 1)];
    let e = decided(vec![source(40)], rows);
    assert_eq!(e.reason, Reason::NoMoreSteps);
    assert_eq!(next(&e), None);
}

#[test]
fn a_discarded_due_step_with_steps_left_is_exhausted_and_the_next_step_follows() {
    let e = decided(vec![source(10)], vec![row("overdue", "discarded", 9)]);
    assert_eq!(e.reason, Reason::AttemptsExhausted);
    assert_eq!(next(&e), Some(("final", days_ahead(11))));
}

#[test]
fn a_stale_failed_row_speaks_before_the_due_steps_backoff() {
    let mut waiting = row("final", "failed", 0);
    waiting.backoff_over = false;
    let e = decided(
        vec![source(25)],
        vec![row("overdue", "failed", 10), waiting],
    );
    assert_eq!(e.reason, Reason::Superseded);
}

#[test]
fn a_failed_row_of_a_later_step_is_discarded_by_the_next_tick_and_never_claimed() {
    // Due 1 day ago: `upcoming` is due; a failed `overdue` row (the clock
    // went back, or the stages changed) is superseded today.
    let e = decided(
        vec![source(1)],
        vec![row("upcoming", "sent", 1), row("overdue", "failed", 0)],
    );
    assert_eq!(e.reason, Reason::Sent);
    assert_eq!(next(&e), Some(("final", days_ahead(20))));
}

#[test]
fn a_reminder_sent_yesterday_holds_the_due_step_until_the_gap_ends() {
    // Due 4 days ago: `overdue` is due; `upcoming` went out yesterday.
    let e = decided(vec![source(4)], vec![row("upcoming", "sent", 1)]);
    assert_eq!(e.reason, Reason::MinGapUntil);
    assert_eq!(e.until, Some(Until::Date(days_ahead(1))));
    assert_eq!(next(&e), Some(("overdue", days_ahead(1))));
}

#[test]
fn no_gap_is_kept_when_min_days_between_is_zero() {
    let stages = stages();
    let e = decide(
        facts(vec![source(4)], vec![row("upcoming", "sent", 0)]),
        Rules {
            stages: &stages,
            min_days_between: 0,
            max_attempts: 5,
            late_payment: &late_payment(),
        },
    );
    assert_eq!(e.reason, Reason::WillSendToday);
}

#[test]
fn reasons_serialize_as_their_labels() {
    for reason in [
        Reason::SourceProblem,
        Reason::MinGapUntil,
        Reason::WillSendToday,
    ] {
        assert_eq!(
            serde_json::to_value(reason).ok(),
            Some(serde_json::Value::from(reason.label()))
        );
    }
    assert_eq!(
        serde_json::to_value(Unusable::NotInSource).ok(),
        Some(serde_json::Value::from("not_in_source"))
    );
}

#[test]
fn in_customer_mode_will_send_today_only_for_an_invoice_the_next_statement_lists() {
    let next_one = decided_in(vec![source(10)], vec![], Some(CustomerPlace::Next));
    assert_eq!(next_one.reason, Reason::WillSendToday);
    let later = decided_in(
        vec![source(10)],
        vec![],
        Some(CustomerPlace::Later {
            ahead: 2,
            per_mail: 2,
        }),
    );
    assert_eq!(later.reason, Reason::LaterStatement);
    assert!(
        later.reason_detail.contains("later statement today"),
        "{}",
        later.reason_detail
    );
    let waits = decided_in(vec![source(10)], vec![], Some(CustomerPlace::WaitsForRetry));
    assert_eq!(waits.reason, Reason::WaitsForRetry);
    // A reason that is not "will send" stays what it is.
    let mut paid = source(10);
    (paid.is_paid, paid.flags_owe) = (Some(true), false);
    let e = decided_in(
        vec![paid],
        vec![],
        Some(CustomerPlace::Later {
            ahead: 1,
            per_mail: 1,
        }),
    );
    assert_eq!(e.reason, Reason::Paid);
}

#[test]
fn a_step_recorded_superseded_says_so_and_is_not_called_suppressed() {
    let mut skipped = row("overdue", "skipped", 1);
    skipped.last_error = Some(
        "superseded: reminders.min_days_between keeps this step back until 2026-12-10, after its last day, 2026-12-08".into(),
    );
    let e = decided(vec![source(10)], vec![skipped]);
    assert_eq!(e.reason, Reason::Superseded);
    assert!(
        e.reason_detail.contains("2026-12-08"),
        "{}",
        e.reason_detail
    );
}

/// The default `[late_payment]` (regime none).
pub(super) fn late_payment() -> crate::config::LatePaymentSettings {
    crate::config::Settings::load_with(&[])
        .map(|s| s.late_payment)
        .unwrap_or_else(|e| panic!("{e}"))
}
