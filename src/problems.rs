//! Source rows are untrusted input: the view is the user's, and it can
//! repeat a key, leave a column NULL or hold a value we cannot use. This
//! module names the problems no single row shows (a repeated key, a row
//! without a customer), lists a source's problems for the operator
//! ([`list`]) and keeps a tick's tally of the rows that cannot make a
//! reminder ([`Tally`]). Whether one row can is decided where it enters,
//! as it is parsed ([`SourceRow::into_parts`]).
//!
//! A row with a problem is skipped: never claimed, never mailed, never a
//! reason for a page, a step or a tick to fail. It is counted under its
//! [`Problem`] label (`job_runs.source_problems`, the tick summary,
//! `invoice_reminder_source_problems_total{problem}`), named in one warning
//! per tick, and listed by `audit` and `check-source`. Once the user fixes
//! it, the next tick reminds it as if nothing had happened.

use std::collections::HashSet;

use crate::config::Calendars;
use crate::db::source_row::SourceRow;
use crate::domain::{InvoiceId, Problem, SourceProblem, count_of};

/// How many example rows a tally keeps for its warning.
pub const EXAMPLES: usize = 5;

/// How many repeated keys a tally remembers, so a key met on two pages is
/// counted once; beyond this a key may be counted again (the count is
/// reported, never trusted for anything).
const REMEMBERED_KEYS: usize = 10_000;

/// The row rule a row with `problem` broke, in the words of
/// docs/own-invoices.md ("Row rules"), for the console's `/problems`.
pub fn rule(problem: Problem) -> &'static str {
    match problem {
        Problem::RepeatedKey => "one row per invoice_id: this invoice_id is on more than one row",
        Problem::NullKey => "invoice_id has a value: it is NULL",
        Problem::MissingField => {
            "a value in every column that needs one: email, due_date, currency or the amount is NULL"
        }
        Problem::BadCurrency => "currency is an ISO 4217 code (case does not matter)",
        Problem::BadAmount => "amount fits its currency's minor units",
        Problem::BadAddress => "email holds a valid address list",
        Problem::BadDueDate => {
            "due_date is a date a step can be counted from: not infinity, -infinity or past the year 262142"
        }
        Problem::UnknownLatePaymentRegime => {
            "late_payment_regime is empty, NULL or a regime: none, eu, de-b2b, de-b2c, fr, uk or custom"
        }
        Problem::BadTimezone => {
            "timezone is empty, NULL or an IANA zone name such as Europe/Berlin (the row is skipped)"
        }
        Problem::UnknownCalendar => {
            "holiday_calendar is empty, NULL, a built-in calendar (DE-BY) or a file of send_window.calendars_dir (the row is sent by the window's days and hours alone)"
        }
    }
}

/// Customer mode: a row without a customer, which no statement can list
/// (`reminders.group_by = "customer"`).
pub fn without_customer(row: &SourceRow) -> SourceProblem {
    row.problem(
        Problem::MissingField,
        "customer_id is NULL (reminders.group_by = \"customer\")",
    )
}

/// One problem per key among `rows`, the rows a claim found sharing their
/// key with others (each names how many rows carry it).
pub fn repeated_keys(rows: &[SourceRow]) -> Vec<SourceProblem> {
    let mut copies: std::collections::HashMap<&Option<InvoiceId>, usize> = Default::default();
    let mut first = Vec::new();
    for row in rows {
        let n = copies.entry(&row.invoice_id).or_insert(0);
        if *n == 0 {
            first.push(row);
        }
        *n = n.saturating_add(1);
    }
    first
        .into_iter()
        .map(|row| {
            let n = copies.get(&row.invoice_id).copied().unwrap_or(0);
            row.problem(
                Problem::RepeatedKey,
                format!("{n} rows of the source have this invoice_id"),
            )
        })
        .collect()
}

/// The source problems one tick met.
#[derive(Debug, Default)]
pub struct Tally {
    counts: [u32; Problem::ALL.len()],
    examples: Vec<SourceProblem>,
    repeated_keys: HashSet<InvoiceId>,
}

impl Tally {
    /// Counts `problem`, unless it is a repeated key already counted.
    pub fn add(&mut self, problem: SourceProblem) {
        if problem.problem == Problem::RepeatedKey
            && let Some(id) = &problem.invoice_id
        {
            if self.repeated_keys.contains(id) {
                return;
            }
            if self.repeated_keys.len() < REMEMBERED_KEYS {
                self.repeated_keys.insert(id.clone());
            }
        }
        if let Some(i) = Problem::ALL.iter().position(|p| *p == problem.problem)
            && let Some(n) = self.counts.get_mut(i)
        {
            *n = n.saturating_add(1);
        }
        if self.examples.len() < EXAMPLES {
            self.examples.push(problem);
        }
    }

    /// All problems counted.
    pub fn total(&self) -> u32 {
        self.counts.iter().fold(0u32, |a, n| a.saturating_add(*n))
    }

    /// Each problem with its count, those counted only.
    pub fn by_problem(&self) -> impl Iterator<Item = (Problem, u32)> + '_ {
        Problem::ALL
            .into_iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
    }

    /// The first few problems, for the tick's warning.
    pub fn examples(&self) -> &[SourceProblem] {
        &self.examples
    }

    /// "invoice 7: bad_currency (...); invoice 9: repeated_key (...)".
    pub fn describe_examples(&self) -> String {
        self.examples
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Checks `rows` (each with how many source rows carry its key) as the
/// operator's listings do: one problem per repeated key, one per other
/// bad row. Returns the problems found, in the rows' order.
pub fn list(
    rows: impl IntoIterator<Item = (SourceRow, i64)>,
    by_customer: bool,
    calendars: &Calendars,
) -> Vec<SourceProblem> {
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for (row, copies) in rows {
        if copies > 1 {
            let Some(id) = row.invoice_id.clone() else {
                continue;
            };
            if seen.insert(id) {
                let n = count_of(usize::try_from(copies).unwrap_or(usize::MAX));
                found.push(row.problem(
                    Problem::RepeatedKey,
                    format!("{n} rows of the source have this invoice_id"),
                ));
            }
            continue;
        }
        if by_customer && row.customer_id.is_none() {
            found.push(without_customer(&row));
            continue;
        }
        if let Some(problem) = row.calendar_problem(calendars) {
            found.push(problem);
        }
        if let Err(problem) = row.into_parts() {
            found.push(problem);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: Option<&str>) -> SourceRow {
        SourceRow {
            invoice_id: id.map(InvoiceId::from),
            number: Some("N".into()),
            amount_minor: Some(100),
            currency: Some("eur".into()),
            due_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 1),
            customer_email: Some("a@example.test, b@example.test".into()),
            ..SourceRow::default()
        }
    }

    fn problem_of(row: SourceRow) -> Option<Problem> {
        row.into_parts().err().map(|p| p.problem)
    }

    #[test]
    fn each_kind_of_bad_row_has_its_own_problem() {
        assert_eq!(problem_of(row(Some("1"))), None);
        assert_eq!(problem_of(row(None)), Some(Problem::NullKey));
        let mut r = row(Some("1"));
        r.currency = Some("XYZ".into());
        assert_eq!(problem_of(r), Some(Problem::BadCurrency));
        let mut r = row(Some("1"));
        r.customer_email = Some("a@example.test, nope".into());
        assert_eq!(problem_of(r), Some(Problem::BadAddress));
        let mut r = row(Some("1"));
        r.amount_minor = None;
        r.amount_major = Some("1e30".into());
        assert_eq!(problem_of(r), Some(Problem::BadAmount));
        let mut r = row(Some("1"));
        r.amount_minor = None;
        assert_eq!(problem_of(r), Some(Problem::MissingField));
    }

    #[test]
    fn a_repeated_key_is_counted_once_per_tick_and_examples_stay_few() {
        let mut tally = Tally::default();
        for _ in 0..3 {
            tally.add(row(Some("7")).problem(Problem::RepeatedKey, "2 rows"));
        }
        for i in 0..10 {
            tally.add(row(Some(&i.to_string())).problem(Problem::BadAddress, "x"));
        }
        assert_eq!(tally.total(), 11);
        assert_eq!(
            tally.by_problem().collect::<Vec<_>>(),
            [(Problem::RepeatedKey, 1), (Problem::BadAddress, 10)]
        );
        assert_eq!(tally.examples().len(), EXAMPLES);
    }

    #[test]
    fn listings_name_a_repeated_key_once() {
        let found = list(
            [
                (row(Some("7")), 2),
                (row(Some("7")), 2),
                (row(None), 0),
                (row(Some("8")), 1),
            ],
            false,
            &Calendars::default(),
        );
        let kinds: Vec<Problem> = found.iter().map(|p| p.problem).collect();
        assert_eq!(kinds, [Problem::RepeatedKey, Problem::NullKey]);
    }

    #[test]
    fn in_customer_mode_a_listing_names_a_row_without_a_customer() {
        let mut with = row(Some("9"));
        with.customer_id = Some("c".into());
        let found = list(
            [(row(Some("8")), 1), (with, 1)],
            true,
            &Calendars::default(),
        );
        let details: Vec<&str> = found.iter().map(|p| p.detail.as_str()).collect();
        assert_eq!(
            details,
            ["customer_id is NULL (reminders.group_by = \"customer\")"]
        );
    }
}
