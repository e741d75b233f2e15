//! Rows marked started and not (yet) handed to the SMTP server: what a run
//! must return when it ends, whatever path ends it.
//!
//! A row enters [`Unsent`] before the statement that marks it started is
//! sent (so a mark whose reply is lost is covered) and leaves it only just
//! before its mail goes to the server (from then on its fate may be
//! unknown). A mail that does not start after all puts its rows back. So
//! whatever ends a run (the lease lost, shutdown, the relay down, a
//! database error, a phase that panicked with rows in its hands), the rows
//! left here were never sent, and the end of the run returns them (`finish`
//! in `tick/mod.rs`, or, with the database away, `deferred`). A SIGKILL
//! leaves them `unknown`; the in-flight limit bounds how many.
//!
//! Each row remembers whether its mail's Message-ID was made for this
//! attempt ("fresh") or is the one its earlier, unknown attempt carried: a
//! handed-back row forgets a fresh one (no mail ever carried it), and keeps
//! the other, so a resend still carries the Message-ID a relay may have
//! seen.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::{Letter, ReminderId};

/// The rows of one run marked started and not handed to the server.
#[derive(Debug, Default)]
pub(super) struct Unsent {
    /// Each row, and whether its Message-ID is fresh.
    rows: Mutex<HashMap<ReminderId, bool>>,
}

/// What the end of a run returns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Returned {
    /// Rows started and never sent.
    pub ids: Vec<ReminderId>,
    /// Of those, the rows whose Message-ID no mail ever carried: it is
    /// cleared.
    pub fresh: Vec<ReminderId>,
}

impl Unsent {
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<ReminderId, bool>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `letters` are about to be marked started (or go back to waiting for
    /// their send).
    pub fn add<'a>(&self, letters: impl IntoIterator<Item = &'a Letter>) {
        let mut rows = self.rows();
        for letter in letters {
            for id in letter.ids() {
                rows.insert(id, letter.fresh_message_id);
            }
        }
    }

    /// Rows a mark did not take after all (another run's sweep handed back
    /// them): not ours to return.
    pub fn forget(&self, ids: impl IntoIterator<Item = ReminderId>) {
        let mut rows = self.rows();
        for id in ids {
            rows.remove(&id);
        }
    }

    /// `letter`'s mail goes to the server now: its rows are no longer ours
    /// to return.
    pub fn handed_over(&self, letter: &Letter) {
        self.forget(letter.ids());
    }

    /// Everything left, for the end of the run.
    pub fn take(&self) -> Returned {
        let rows = std::mem::take(&mut *self.rows());
        let mut returned = Returned::default();
        for (id, fresh) in rows {
            returned.ids.push(id);
            if fresh {
                returned.fresh.push(id);
            }
        }
        returned.ids.sort_unstable();
        returned.fresh.sort_unstable();
        returned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::LetterKind;

    fn letter(ids: &[i64], fresh: bool) -> Letter {
        let row = |id: i64| crate::domain::Claimed {
            id: ReminderId(id),
            attempts: 0,
            step: "overdue".into(),
            invoice: crate::domain::Invoice {
                id: id.into(),
                number: String::new(),
                amount: crate::domain::Money::from_minor(
                    1,
                    crate::domain::Currency::parse("EUR").unwrap_or_else(|e| panic!("{e}")),
                ),
                due_date: chrono::NaiveDate::MIN,
                payment_url: None,
                late_payment_regime: None,
            },
            customer: crate::domain::Customer {
                name: String::new(),
                email: crate::domain::Recipients::parse("a@example.test")
                    .unwrap_or_else(|e| panic!("{e}")),
                locale: None,
                id: None,
                timezone: None,
                holiday_calendar: None,
            },
            thread: Vec::new(),
            stored_message_id: None,
        };
        Letter {
            rows: ids.iter().copied().map(row).collect(),
            message_id: "m@x".into(),
            fresh_message_id: fresh,
            kind: LetterKind::Reminder,
        }
    }

    #[test]
    fn only_rows_never_handed_over_are_handed_back_and_fresh_ids_are_named() {
        let unsent = Unsent::default();
        let (a, b, c) = (
            letter(&[1, 2], true),
            letter(&[3], false),
            letter(&[4], true),
        );
        unsent.add([&a, &b, &c]);
        unsent.handed_over(&a);
        unsent.forget([ReminderId(4)]);
        // A send that did not start puts its rows back.
        unsent.add([&a]);
        unsent.handed_over(&a);
        let returned = unsent.take();
        assert_eq!(returned.ids, [ReminderId(3)]);
        assert!(returned.fresh.is_empty());
        assert_eq!(unsent.take(), Returned::default());
    }
}
