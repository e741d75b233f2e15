//! What makes a source row owe a reminder today: each condition written
//! once, as SQL over the source row `s` (and, where a step is meant, the
//! window row `w`), with named parameters ([`super::params`]) that
//! [`OwingDay::params`] binds. The scans, the claims, the listings and
//! `explain` compose these and nothing else, so a condition fixed here is
//! fixed in every statement.
//!
//! "Today" is each row's own: its customer's local date at the database
//! clock's instant (`$now`), in the row's `timezone` when the source has
//! one the database knows, else in `$tz` (`sql::Names::local` writes it).
//!
//! An invoice owes its **due step** (`crate::stages`) when
//! - its due date is in that step's window on its own today, counted by
//!   its own calendar ([`in_window!`], over the rows of [`windows!`]);
//! - it is unpaid (`is_paid` false; NULL counts as paid: no reminder when
//!   in doubt) and not paused (`paused` not true, `paused_until` before
//!   its today; neither it nor, in customer
//!   mode, its customer paused in the console; no payment signal holding
//!   it, [`hold_active!`]) ([`owes_flags!`]);
//! - it has every column a reminder needs ([`complete!`]);
//! - no reminder of it was `sent` or `sending` within
//!   `reminders.min_days_between` days ([`invoice_gap_clear!`]); in
//!   customer mode, none of its customer's either, except a statement that
//!   left invoices for the next tick (`continued`: its continuation is the
//!   same round of mail) ([`customer_gap_clear!`]);
//! - and it has no reminder row for the step yet, or a `failed` one whose
//!   retry is due.
//!
//! The gap counts from a reminder's `claimed_at` (a retry's claim is its
//! mail), in the row's own days: a reminder claimed on day D blocks days D
//! to D + min_days_between - 1. Whether the row may be claimed now, its
//! customer's send window open, is asked apart ([`claimable!`]).
//!
//! Per-row lookups ([`reminders_of!`]: one invoice's or one customer's
//! reminders, through the index meant and no other) serve the pages and
//! claims, a few hundred rows each; listings over a whole backlog use the
//! plain `NOT EXISTS` the planner may turn into an anti-join, which over
//! a whole backlog beats a lookup per row.

mod day;
mod gap;
pub use day::{OwingDay, Pricing};
pub(crate) use gap::{
    blocks_gap, customer_gap_clear, gap_start, gap_until, invoice_gap_clear, reminders_of,
};

/// SQL: the source date `$d` is one a reminder can be dated from: finite,
/// and within the dates the worker can hold (years up to 262142). A view
/// may hold `infinity` or `-infinity` in a `date` column (a valid
/// PostgreSQL value, often "no due date"); such a row is reported
/// (`bad_due_date`), never read as a date and never in a page.
macro_rules! sane_date {
    ($d:literal) => {
        concat!(
            $d,
            " BETWEEN '4713-01-01 BC'::date AND '262142-12-31'::date"
        )
    };
}
pub(crate) use sane_date;

/// SQL: the source date `$d` as a value the worker can hold, or NULL.
macro_rules! date_value {
    ($d:literal) => {
        concat!(
            "CASE WHEN ",
            $crate::db::owing::sane_date!($d),
            " THEN ",
            $d,
            " END"
        )
    };
}
pub(crate) use date_value;

/// SQL: today's step windows as rows `w(key, due_from, due_to, day,
/// grp)`: one set per local date that is today somewhere and per calendar
/// group (`crate::stages::LocalWindows`).
macro_rules! windows {
    () => {
        concat!(
            "unnest($step_keys::text[], $due_froms::date[], $due_tos::date[],",
            " $step_days::date[], $step_groups::text[]) AS w(key, due_from, due_to, day, grp)"
        )
    };
}
pub(crate) use windows;

/// SQL: each step's due dates on any local date today, as rows `v(key,
/// due_from, due_to, sure_from, sure_to)`: the union of its [`windows!`],
/// one range a listing walks once, and the part of it that owes the step
/// whatever a row's own date and calendar (no `sure_to`: none).
macro_rules! scan_ranges {
    () => {
        concat!(
            "unnest($scan_keys::text[], $scan_froms::date[], $scan_tos::date[],",
            " $sure_froms::date[], $sure_tos::date[]) AS v(key, due_from, due_to, sure_from, sure_to)"
        )
    };
}
pub(crate) use scan_ranges;

/// SQL: the due date of row `$s` is in the range of `$w` (a row of
/// [`windows!`] or [`scan_ranges!`]), or from `$from` (NULL: no start) to
/// `$to`; never a date [`sane_date!`] refuses.
macro_rules! in_range {
    ($s:literal, $w:literal) => {
        $crate::db::owing::in_range!($s, concat!($w, ".due_from"), concat!($w, ".due_to"))
    };
    ($s:literal, $from:expr, $to:expr) => {
        concat!(
            $s,
            ".due_date >= COALESCE(",
            $from,
            ", '4713-01-01 BC'::date) AND ",
            $s,
            ".due_date <= ",
            $to
        )
    };
}
pub(crate) use in_range;

/// SQL: the due date of row `$s` is in window `w` of its own date and
/// calendar group (its step is due on its customer's today, `{today}`,
/// counted by its calendar, `{group}`: `sql::Names::local`); never a date
/// [`sane_date!`] refuses.
macro_rules! in_window {
    ($s:literal) => {
        concat!(
            "w.day = {today} AND w.grp = {group} AND ",
            $crate::db::owing::in_range!($s, "w")
        )
    };
}
pub(crate) use in_window;

/// SQL: row `$s` is unpaid and not paused today: neither by the source's
/// own columns nor in the console (`console_pauses`: the invoice, or in
/// customer mode its customer; two anti-joins on that small table's
/// unique indexes), and no payment signal holds it (`payment_holds`, by
/// its key).
macro_rules! owes_flags {
    ($s:literal) => {
        concat!(
            "NOT ",
            $s,
            ".is_paid AND ",
            $s,
            ".paused IS NOT TRUE AND (",
            $s,
            ".paused_until IS NULL OR ",
            $s,
            ".paused_until < {today})",
            " AND ",
            $crate::db::owing::not_withheld!(concat!($s, ".invoice_id::text"), "{customer}")
        )
    };
}
pub(crate) use owes_flags;

/// SQL: nothing in the worker's own tables keeps back the invoice keyed
/// `$invoice` (of customer `$customer`, NULL in invoice mode): no console
/// pause of the invoice or its customer (two anti-joins on that small
/// table's unique indexes), and no payment hold of one of its objects in
/// force (`payment_holds`, by its key). The claim reads it through
/// [`owes_flags!`]; the mark, and the last check before a letter that
/// waited goes, read it again on the claimed rows (`deliveries`), so a
/// hold that came after the claim still stops the mail. Written as
/// `NOT EXISTS` terms, never `NOT (... OR ...)`, so the planner can make
/// them anti-joins.
macro_rules! not_withheld {
    ($invoice:expr, $customer:expr) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM {ir}.console_pauses cp WHERE cp.invoice_id = ",
            $invoice,
            ") AND NOT EXISTS (SELECT 1 FROM {ir}.console_pauses cp WHERE cp.customer_id = ",
            $customer,
            ") AND NOT EXISTS (SELECT 1 FROM {ir}.payment_holds ph WHERE ph.invoice_id = ",
            $invoice,
            " AND ",
            $crate::db::owing::hold_active!("ph"),
            ")"
        )
    };
}
pub(crate) use not_withheld;

/// SQL: payment hold `h` holds its invoice's reminders now: paid,
/// disputed (or lost), or pending and not yet expired (`db::payments`).
macro_rules! hold_active {
    ($h:literal) => {
        concat!(
            $h,
            ".state IN ('paid', 'pending', 'disputed', 'lost') AND (",
            $h,
            ".expires_at IS NULL OR ",
            $h,
            ".expires_at > now())"
        )
    };
}
pub(crate) use hold_active;

/// SQL: row `s` may owe step `$step` as far as the reference rates go: the
/// step claims no late payment (`$late_steps`), or the row's regime (its
/// `late_payment_regime`, else `$regime`) is not one of those whose rates
/// lack today's half-year (`$waiting_regimes`). A late-payment step whose
/// claim cannot be priced waits, unclaimed; other steps go.
macro_rules! priced {
    ($step:literal) => {
        concat!(
            "(",
            $step,
            " <> ALL($late_steps::text[]) OR COALESCE(lower({regime}), $regime::text)",
            " <> ALL($waiting_regimes::text[]))"
        )
    };
}
pub(crate) use priced;

/// SQL: row `s`'s customer's send window is open at `$now` on their own
/// clock, by their own calendar (`{open}`: `sql::Names::local`). The scans
/// that feed the claims ask it (a row outside its window is not owed yet);
/// what is owed is decided without it.
macro_rules! window_open {
    () => {
        "{open}"
    };
}
pub(crate) use window_open;

/// SQL: row `s` may be claimed now: its customer's window is open
/// ([`window_open!`]) and its zone, if it names one, is one the database
/// knows (`{zone_ok}`; a scan returns such a row as owed, in the window's
/// zone, so that it is reported `bad_timezone`, and the claim refuses it).
macro_rules! claimable {
    () => {
        concat!("{zone_ok} AND ", $crate::db::owing::window_open!())
    };
}
pub(crate) use claimable;

/// SQL: row `s` has every column a reminder needs (its values are checked
/// by `crate::problems`).
macro_rules! complete {
    () => {
        "s.email IS NOT NULL AND s.currency IS NOT NULL AND {amount_value} IS NOT NULL"
    };
}
pub(crate) use complete;

/// SQL: the `failed` row `r` may be tried again now: it never used an
/// attempt (never tried, or handed back unattempted: the relay was down,
/// throttling, or cut the connection before the end of the message, so the
/// next tick tries it as soon as the relay answers), or its backoff
/// (`$backoff_first` seconds, doubling per attempt made, at most
/// `$backoff_max`) is over, by the database clock. The doubling and the
/// wait are capped before an interval is made, so no attempt count can
/// overflow it. A run never re-claims a row it already tried
/// (`run_id IS DISTINCT FROM $run_id` beside this), so a row handed back
/// waits for the next tick.
macro_rules! backoff_over {
    () => {
        concat!(
            "(r.attempts = 0 OR r.last_attempt_at IS NULL OR r.last_attempt_at <= now() - ",
            $crate::db::owing::backoff_wait!(),
            ")"
        )
    };
}
pub(crate) use backoff_over;

/// SQL: the wait after the last attempt of the `failed` row `r`.
macro_rules! backoff_wait {
    () => {
        concat!(
            "make_interval(secs => LEAST($backoff_first::float8",
            " * power(2::float8, LEAST(greatest(r.attempts - 1, 0), 60)), $backoff_max::float8))"
        )
    };
}
pub(crate) use backoff_wait;
