//! Reading the invoices that owe a reminder today, from the source, in
//! invoice mode: keyset pages over one step's due-date window.
//!
//! Invoices come from `source.relation` (`{src}`, a view the user writes
//! over their billing tables; README, "Using your own invoices"). What
//! makes a row owe its **due step** is `owing`'s conditions. For one day the
//! due step is a function of the due date, so each step is one due-date
//! range ([`Window`]) and a scan is keyset pages on `(due_date, invoice_id
//! COLLATE "C")`, range by range: with an index on exactly that (over
//! unpaid rows), one index range scan per page.
//!
//! **The source is untrusted input.** Nothing here assumes one row per key
//! or a value in every column: every column is read as it is, NULLs
//! included ([`SourceRow`]); deciding what a row is worth is the caller's
//! (`crate::problems`). Rows whose key or due date is NULL have no place in
//! the keyset order, so pages leave them out and `owed::unusable_rows`
//! finds them.
//!
//! The "no reminder yet" and "recently reminded" tests are per-row probes of
//! the UNIQUE (invoice_id, period) index, kept that way with `OFFSET 0`:
//! otherwise PostgreSQL may plan an anti-join from `reminders` statistics,
//! which are stale exactly when it matters (the table grows by a whole
//! backlog within one tick), and rescan `reminders` for every page
//! (BENCHMARKS.md, "The per-row probe").

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::{
    OwingDay, gap_until, in_window, invoice_gap_clear, owes_flags, priced, window_open, windows,
};
use super::params::Params;
use super::source_row::{SourceRow, source_columns};
use crate::domain::InvoiceId;
use crate::stages::Window;

/// Position of the last row of a page; the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueKey {
    pub due_date: NaiveDate,
    pub id: InvoiceId,
}

/// The scan's page statement: the page of window `$page_from`..`$page_to`
/// (step `$step`) after `($after_date, $after_key)` (NULL for the first
/// page, which then starts at the window's start).
///
/// The inner query takes the next `$limit` unpaid rows of the window in
/// index order and nothing else; whether each one owes the step is decided
/// only for those rows, in the outer query. The `LIMIT` keeps PostgreSQL
/// from pushing the per-row probes into the scan, where a misestimate of
/// their cost (stale `reminders` statistics mid-backlog) made it prefer
/// driving the view from `customers` and sorting the whole window
/// (BENCHMARKS.md, "The per-row probe"). A page therefore costs the same
/// whether its rows owe a reminder or not, and may return fewer owed rows
/// than it examined.
///
/// `clear` is NULL for a row that owes nothing (paid, paused, or its step
/// already has a row), true for one that owes the step, false for one the
/// gap keeps back (then `gap_until` is the first day it no longer does).
///
/// The keyset condition is a plain row comparison with constants (the
/// `COALESCE`s of parameters), so it is an index condition, never a filter:
/// otherwise every page would scan the window from its start (quadratic
/// over a backlog). One statement serves every page.
const PAGE: &str = concat!(
    "SELECT ",
    source_columns!(),
    ", o.clear, CASE WHEN NOT o.clear THEN ",
    gap_until!(invoice),
    " END AS gap_until",
    " FROM (SELECT s.* FROM {src} s",
    " WHERE s.due_date >= COALESCE($page_from, '4713-01-01 BC'::date) AND s.due_date <= $page_to",
    " AND (s.due_date, s.invoice_id::text COLLATE \"C\")",
    " > (COALESCE($after_date, '-infinity'::date), COALESCE($after_key, ''))",
    " AND NOT s.is_paid AND s.invoice_id IS NOT NULL",
    " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $limit) s",
    // The step's own row first: a row already claimed (by another
    // replica, mid-tick) is settled by one probe, before its day and
    // window are worked out.
    " CROSS JOIN LATERAL (SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM {ir}.reminders r",
    " WHERE r.invoice_id = s.invoice_id::text AND r.period = $step OFFSET 0)",
    " AND EXISTS (SELECT 1 FROM ",
    windows!(),
    " WHERE w.key = $step AND ",
    in_window!("s"),
    ") AND ",
    owes_flags!("s"),
    " AND ",
    priced!("$step"),
    " AND ",
    window_open!(),
    " THEN ",
    invoice_gap_clear!(probe),
    // `OFFSET 0` keeps the verdict a subquery of its own, worked out once
    // per row: flattened, PostgreSQL copies it into both columns that read
    // it and runs every probe twice.
    " END AS clear OFFSET 0) o",
    " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\""
);

/// One page of the scan: the rows that owe the window's step, those the
/// gap keeps back, and where the next page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwedPage {
    /// The examined rows that owe the step, in `(due_date, id)` order, as
    /// the source has them (unchecked).
    pub owed: Vec<SourceRow>,
    /// The examined rows that would owe the step but for the gap, each
    /// with the first day the gap no longer keeps it back.
    pub held: Vec<(SourceRow, NaiveDate)>,
    /// The last row examined: the next page starts after it. None: the
    /// window has no unpaid invoice after `after`.
    pub last: Option<OverdueKey>,
    /// How many rows were examined; fewer than the limit means the window
    /// is done.
    pub examined: usize,
}

#[derive(FromRow)]
struct PageRow {
    clear: Option<bool>,
    gap_until: Option<NaiveDate>,
    #[sqlx(flatten)]
    row: SourceRow,
}

/// The page's own parameters, besides `today`'s.
fn page_params<'a>(
    today: &'a OwingDay,
    window: &'a Window,
    after_date: &'a Option<NaiveDate>,
    after_key: &'a Option<InvoiceId>,
    limit: &'a i64,
) -> Params<'a> {
    today
        .params()
        .with("page_from", &window.due_from)
        .with("page_to", &window.due_to)
        .with("step", &window.step.key)
        .with("after_date", after_date)
        .with("after_key", after_key)
        .with("limit", limit)
}

/// The next `limit` unpaid rows of `window` after `after`, in
/// `(due_date, id)` order, and which of them owe its step.
pub async fn fetch_owed_page(
    db: &Db,
    window: &Window,
    today: &OwingDay,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<OwedPage, sqlx::Error> {
    on_db!(db, |c| owed_page_on(c, db, window, today, after, limit)
        .await)
}

/// [`fetch_owed_page`] on `c` (inside a caller's transaction: a page and
/// its claim are one).
pub(super) async fn owed_page_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    window: &Window,
    today: &OwingDay,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<OwedPage, sqlx::Error> {
    let statement = db.statement(PAGE);
    let (after_date, after_key) = match after {
        Some(k) => (Some(k.due_date), Some(k.id)),
        None => (None, None),
    };
    let limit = i64::from(limit);
    let params = page_params(today, window, &after_date, &after_key, &limit);
    let rows: Vec<PageRow> = statement.fetch_all(&mut *c, &params).await?;
    let examined = rows.len();
    // Rows are in the window with a key: neither is NULL.
    let last = rows.iter().rev().find_map(|r| {
        Some(OverdueKey {
            due_date: r.row.due_date?,
            id: r.row.invoice_id.clone()?,
        })
    });
    let mut page = OwedPage {
        owed: Vec::new(),
        held: Vec::new(),
        last,
        examined,
    };
    for r in rows {
        match (r.clear, r.gap_until) {
            (Some(true), _) => page.owed.push(r.row),
            (Some(false), Some(until)) => page.held.push((r.row, until)),
            _ => {}
        }
    }
    Ok(page)
}

/// `EXPLAIN (FORMAT JSON, VERBOSE)` of a page after the first of `window`
/// (the statement a backlog runs most), with today's parameters.
pub async fn explain_owed_page(
    db: &Db,
    window: &Window,
    today: &OwingDay,
    limit: u32,
) -> Result<serde_json::Value, sqlx::Error> {
    let statement = db
        .statement(&format!("EXPLAIN (FORMAT JSON, VERBOSE) {PAGE}"))
        .once();
    let (after_date, after_key) = (window.due_from, Some(InvoiceId::default()));
    let limit = i64::from(limit);
    let params = page_params(today, window, &after_date, &after_key, &limit);
    on_db!(db, |c| statement.fetch_scalar(&mut *c, &params).await)
}

/// Estimated rows of `schema.table` (`pg_class.reltuples`; -1 or 0 when
/// never analyzed).
pub async fn estimated_rows(db: &Db, schema: &str, table: &str) -> Result<f64, sqlx::Error> {
    on_db!(db, |c| sqlx::query_scalar(
        "SELECT COALESCE((SELECT c.reltuples::float8 FROM pg_class c
                            JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = $1 AND c.relname = $2), 0)"
    )
    .persistent(db.named())
    .bind(schema)
    .bind(table)
    .fetch_one(&mut *c)
    .await)
}

/// Every source row whose key is `id` (`preview`, `explain`): none, one,
/// or (a source problem) several.
pub async fn rows_by_key(db: &Db, id: &InvoiceId) -> Result<Vec<SourceRow>, sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query_as(db.sql(concat!(
            "SELECT ",
            source_columns!(),
            " FROM {src} s WHERE s.invoice_id::text = $1 LIMIT 10"
        )))
        .persistent(db.named())
        .bind(id)
        .fetch_all(&mut *c)
        .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Problem;

    fn complete() -> SourceRow {
        SourceRow {
            invoice_id: Some(InvoiceId::from("7")),
            number: Some("INV-7".into()),
            amount_minor: Some(100),
            currency: Some("EUR".into()),
            due_date: NaiveDate::from_ymd_opt(2026, 11, 1),
            customer_email: Some("a@example.test".into()),
            ..SourceRow::default()
        }
    }

    #[test]
    fn a_row_needs_a_key_an_email_a_due_date_a_currency_and_an_amount() {
        assert!(complete().into_parts().is_ok());
        let problem = |row: SourceRow| row.into_parts().err().map(|p| (p.problem, p.detail));
        let mut row = complete();
        row.invoice_id = None;
        assert_eq!(
            problem(row),
            Some((Problem::NullKey, "invoice_id is NULL".into()))
        );
        for (column, clear) in [
            (
                "email",
                (|r: &mut SourceRow| r.customer_email = None) as fn(&mut SourceRow),
            ),
            ("due_date", |r| r.due_date = None),
            ("currency", |r| r.currency = None),
            ("the amount", |r| r.amount_minor = None),
        ] {
            let mut row = complete();
            clear(&mut row);
            assert_eq!(
                problem(row),
                Some((Problem::MissingField, format!("{column} is NULL")))
            );
        }
    }
}
