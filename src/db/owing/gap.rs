//! The `reminders.min_days_between` gap as SQL: the reminders of one
//! invoice or customer that keep a row back, and the first day they no
//! longer do. Part of [`super`]'s conditions, written once here.

/// SQL: the first instant the `min_days_between` gap still covers.
macro_rules! gap_start {
    () => {
        "(({today} - $gap_days::int + 1)::timestamp AT TIME ZONE {zone})"
    };
}
pub(crate) use gap_start;

/// SQL: the reminders of one invoice (`invoice`, `$key` its key as text)
/// or one customer (`customer`, `$key` its customer key as text; `in gap`:
/// only those claimed within the gap), as a row source for a
/// per-row lookup. The subquery's only conditions are the key (and the
/// start) of the index the lookup means, UNIQUE (invoice_id, period) or
/// `reminders_customer_claimed`; `OFFSET 0` keeps the lookup's other
/// conditions (a status, a date) out of it. Pushed in, they let PostgreSQL
/// combine that index with any other index on `reminders` whose condition
/// they imply (a bitmap AND with an index of every reminder sent today,
/// say), and read that index whole for every row: a cost per reminder
/// that grows with what was already sent, whatever the statistics say
/// (BENCHMARKS.md, "Lookups that read a bounded number of rows").
macro_rules! reminders_of {
    (invoice $($key:expr),+) => {
        concat!(
            "(SELECT * FROM {ir}.reminders WHERE invoice_id = ",
            $($key),+,
            " OFFSET 0)"
        )
    };
    (customer $($key:expr),+) => {
        concat!(
            "(SELECT * FROM {ir}.reminders WHERE customer_id = ",
            $($key),+,
            " OFFSET 0)"
        )
    };
    (customer $key:literal in gap) => {
        concat!(
            "(SELECT * FROM {ir}.reminders WHERE customer_id = ",
            $key,
            " AND claimed_at >= ",
            $crate::db::owing::gap_start!(),
            " OFFSET 0)"
        )
    };
}
pub(crate) use reminders_of;

/// SQL: the reminder `g` blocks the gap (`sent` or `sending`, claimed
/// within it).
macro_rules! blocks_gap {
    () => {
        concat!(
            "g.status IN ('sent', 'sending') AND g.claimed_at >= ",
            $crate::db::owing::gap_start!()
        )
    };
}
pub(crate) use blocks_gap;

/// SQL: no reminder of row `s`'s invoice was `sent` or `sending` within
/// the gap. `probe`: a lookup of the invoice's own reminders per row
/// ([`reminders_of!`]); `anti`: a condition the planner may turn into an
/// anti-join, for listings over a whole backlog.
macro_rules! invoice_gap_clear {
    (probe) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM ",
            $crate::db::owing::reminders_of!(invoice "s.invoice_id::text"),
            " g WHERE ",
            $crate::db::owing::blocks_gap!(),
            ")"
        )
    };
    (anti) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.invoice_id = s.invoice_id::text AND ",
            $crate::db::owing::blocks_gap!(),
            ")"
        )
    };
}
pub(crate) use invoice_gap_clear;

/// SQL: row `s`'s customer got no statement `sent` or `sending` within the
/// gap, but for statements that left invoices for the next tick
/// (`continued`). A lookup of the customer's reminders of the gap per row
/// ([`reminders_of!`]).
macro_rules! customer_gap_clear {
    () => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM ",
            $crate::db::owing::reminders_of!(customer "s.customer_id::text" in gap),
            " g WHERE ",
            $crate::db::owing::blocks_gap!(),
            " AND NOT g.continued)"
        )
    };
}
pub(crate) use customer_gap_clear;

/// SQL: the first day the gap no longer holds row `s` back (NULL: it does
/// not), by the invoice's own reminders and (`customer`) its customer's:
/// the day after the latest blocking claim's day plus `min_days_between`
/// less one. Read only for rows the gap keeps back.
macro_rules! gap_until {
    (invoice) => {
        concat!(
            "((",
            $crate::db::owing::gap_until!(@latest invoice),
            ") AT TIME ZONE {zone})::date + $gap_days::int"
        )
    };
    (customer) => {
        concat!(
            "((GREATEST((",
            $crate::db::owing::gap_until!(@latest invoice),
            "), (SELECT max(g.claimed_at) FROM ",
            $crate::db::owing::reminders_of!(customer "s.customer_id::text" in gap),
            " g WHERE ",
            $crate::db::owing::blocks_gap!(),
            " AND NOT g.continued))) AT TIME ZONE {zone})::date + $gap_days::int"
        )
    };
    (@latest invoice) => {
        concat!(
            "SELECT max(g.claimed_at) FROM ",
            $crate::db::owing::reminders_of!(invoice "s.invoice_id::text"),
            " g WHERE ",
            $crate::db::owing::blocks_gap!()
        )
    };
}
pub(crate) use gap_until;
