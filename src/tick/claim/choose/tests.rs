//! A customer's statement, chosen over rows built by hand: at most the
//! cap, oldest due date first; broken rows, suppressed addresses, retry
//! backoff, resent statements and the gap between statements.

use std::collections::HashSet;

use chrono::NaiveDate;

use super::*;
use crate::db::customers::{CustomerRow, Owes};

fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 12, 4).unwrap_or_default()
}

/// A clean row of customer `c`, key `key`, due `days` before today.
fn row(c: &str, key: &str, days: i64) -> CustomerRow {
    CustomerRow {
        step: "overdue".into(),
        step_from: Some(shift(today(), -30)),
        owes: Owes::New,
        copies: 1,
        row: SourceRow {
            invoice_id: Some(InvoiceId::from(key)),
            number: Some(format!("N-{key}")),
            amount_minor: Some(100),
            currency: Some("EUR".into()),
            due_date: Some(shift(today(), -days)),
            customer_email: Some(format!("{c}@example.test")),
            customer_id: Some(c.into()),
            ..SourceRow::default()
        },
    }
}

fn keys(picks: &[Pick]) -> Vec<&str> {
    picks.iter().map(|p| p.key.as_str()).collect()
}

fn choose(rows: Vec<CustomerRow>, per_mail: usize) -> (Chosen, Vec<SourceProblem>) {
    choose_with(rows, per_mail, &HashSet::new())
}

fn choose_with(
    rows: Vec<CustomerRow>,
    per_mail: usize,
    suppressed: &HashSet<String>,
) -> (Chosen, Vec<SourceProblem>) {
    let mut problems = Vec::new();
    let chosen = statements(rows, per_mail, suppressed, today(), &mut |p| {
        problems.push(p)
    });
    (chosen, problems)
}

#[test]
fn repeated_keys_and_broken_rows_take_no_place_in_a_customers_mail() {
    let mut twice = row("c", "a", 20);
    twice.copies = 2;
    let mut twice_too = row("c", "b", 19);
    twice_too.copies = 2;
    let mut broken = row("c", "d", 18);
    broken.row.customer_email = Some("not an address".into());
    let clean = row("c", "e", 18);
    let (chosen, problems) = choose(vec![twice, twice_too, broken, clean], 1);
    let [statement] = chosen.statements.as_slice() else {
        panic!("one statement: {chosen:?}");
    };
    assert_eq!(keys(&statement.letter), ["e"]);
    assert!(!statement.continued);
    let labels: Vec<_> = problems.iter().map(|p| p.problem).collect();
    assert_eq!(
        labels,
        [
            Problem::RepeatedKey,
            Problem::RepeatedKey,
            Problem::BadAddress
        ]
    );
}

#[test]
fn a_statement_holds_at_most_the_limit_oldest_first_and_says_more_follow() {
    let rows = vec![row("c", "a", 30), row("c", "b", 20), row("c", "d", 10)];
    let (chosen, _) = choose(rows, 2);
    let [statement] = chosen.statements.as_slice() else {
        panic!("one statement: {chosen:?}");
    };
    assert_eq!(keys(&statement.letter), ["a", "b"]);
    assert!(statement.continued);
}

#[test]
fn every_address_suppressed_is_claimed_to_be_skipped_and_takes_no_place() {
    let mut gone = row("c", "a", 30);
    gone.row.customer_email = Some("gone@example.test".into());
    let rows = vec![gone, row("c", "b", 20)];
    let suppressed: HashSet<String> = ["gone@example.test".to_owned()].into();
    let (chosen, _) = choose_with(rows, 1, &suppressed);
    let [statement] = chosen.statements.as_slice() else {
        panic!("one statement: {chosen:?}");
    };
    assert_eq!(keys(&statement.letter), ["b"]);
    assert_eq!(keys(&statement.skipped), ["a"]);
    assert!(!statement.continued);
}

#[test]
fn a_customer_waits_for_a_retrys_backoff_and_its_problems_are_still_reported() {
    let mut waiting = row("c", "a", 30);
    waiting.owes = Owes::Waiting;
    let mut broken = row("c", "b", 20);
    broken.row.currency = Some("XYZ".into());
    let rows = vec![waiting, broken, row("c", "d", 10), row("e", "f", 10)];
    let (chosen, problems) = choose(rows, 5);
    assert_eq!(chosen.waiting, ["c"]);
    let customers: Vec<_> = chosen
        .statements
        .iter()
        .map(|s| s.customer.as_str())
        .collect();
    assert_eq!(customers, ["e"]);
    assert_eq!(problems.len(), 1);
}

#[test]
fn a_due_retry_and_new_steps_go_in_one_statement() {
    let mut retry = row("c", "a", 30);
    retry.owes = Owes::Retry {
        id: ReminderId(7),
        message_id: None,
    };
    let (chosen, _) = choose(vec![retry, row("c", "b", 20)], 5);
    let [statement] = chosen.statements.as_slice() else {
        panic!("one statement: {chosen:?}");
    };
    assert_eq!(keys(&statement.letter), ["a", "b"]);
    assert_eq!(statement.letter[0].retry, Some(ReminderId(7)));
    assert_eq!(statement.resend_of, None);
}

#[test]
fn a_resent_statement_goes_as_it_was_and_the_rest_follows() {
    let resend = |key: &str, id: i64| {
        let mut r = row("c", key, 30);
        r.owes = Owes::Retry {
            id: ReminderId(id),
            message_id: Some("statement-c.5.1@x".into()),
        };
        r
    };
    let rows = vec![resend("a", 5), row("c", "b", 25), resend("d", 6)];
    let (chosen, _) = choose(rows, 5);
    let [statement] = chosen.statements.as_slice() else {
        panic!("one statement: {chosen:?}");
    };
    assert_eq!(keys(&statement.letter), ["a", "d"]);
    assert_eq!(statement.resend_of.as_deref(), Some("statement-c.5.1@x"));
    assert!(statement.continued);
}

#[test]
fn a_step_the_gap_holds_past_its_window_is_superseded_and_one_it_lets_through_is_not() {
    // Due 20 days ago in a window that started 30 days before today: the
    // step stays due for 10 more days.
    let mut held_long = row("c", "a", 20);
    held_long.owes = Owes::Held(shift(today(), 11));
    let mut held_short = row("c", "b", 20);
    held_short.owes = Owes::Held(shift(today(), 10));
    let mut last_step = row("c", "d", 20);
    last_step.step_from = None;
    last_step.owes = Owes::Held(shift(today(), 400));
    let (chosen, _) = choose(vec![held_long, held_short, last_step], 5);
    assert!(chosen.statements.is_empty());
    let superseded: Vec<_> = chosen
        .superseded
        .iter()
        .map(|s| s.invoice_id.as_str())
        .collect();
    assert_eq!(superseded, ["a"]);
}

#[test]
fn repeated_keys_are_those_seen_more_than_once() {
    let twice = repeated(["a", "b", "a", "c", "a", "b"]);
    let mut keys: Vec<_> = twice.into_iter().collect();
    keys.sort_unstable();
    assert_eq!(keys, ["a", "b"]);
    assert!(repeated(["x", "y"]).is_empty());
}
