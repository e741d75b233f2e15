//! Reading the invoices that owe a reminder today, from the source.
//!
//! Invoices come from `source.relation` (`{src}`, a view the user writes
//! over their billing tables; README, "Using your own invoices"). An invoice
//! owes its **due step** (`crate::stages`) unless it is paid (`is_paid`;
//! NULL counts as paid: no reminder when in doubt), paused (`paused`, NULL
//! counting as not paused; `paused_until >= today`, with "today" the
//! worker's, in `schedule.timezone`), already has a row for that step, or
//! had a reminder `sent` or `sending` within `reminders.min_days_between`
//! days. For one day the due step is a function of the due date, so each
//! step is one due-date range ([`Window`]) and a scan is keyset pages on
//! `(due_date, invoice_id COLLATE "C")`, range by range: with an index on
//! exactly that (over unpaid rows), one index range scan per page.
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
//! backlog within one tick), and rescan `reminders` for every page.

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use crate::domain::{Amount, Customer, Invoice, InvoiceId, Problem, SourceProblem};
use crate::stages::Window;

/// Position of the last row of a page; the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueKey {
    pub due_date: NaiveDate,
    pub id: InvoiceId,
}

/// What, besides its due step, decides whether an invoice owes a reminder
/// today. Statements that test it bind it first ([`bind_owed!`]).
#[derive(Debug, Clone, Copy)]
pub struct Owed<'a> {
    /// The database's date in `schedule.timezone`.
    pub today: NaiveDate,
    /// `schedule.timezone`, for "created on which day".
    pub timezone: &'a str,
    pub min_days_between: u32,
}

/// The conditions shared by the scan, the claims and the listings, over
/// the source row `s`. They read **fixed parameters**: `$1` today, `$2` the
/// gap in days, `$3` the time zone. A statement that uses them binds
/// [`Owed`] first with [`bind_owed!`] and numbers its own parameters from
/// `$4`, so no statement can bind the shared values in the wrong order.
///
/// `owed_flags!` is the row's own flags (paid, paused); the gap test
/// ("no reminder sent or being sent within `min_days_between` days") comes
/// as a per-row probe of the (invoice_id, period) index (`gap_probe!`, kept
/// a probe by `OFFSET 0`: for a page's few hundred rows) or as a plain
/// `NOT EXISTS` the planner may turn into an anti-join (`gap_anti!`: for
/// listings over a whole backlog, where 1M probes took 6 s and a hash
/// anti-join under one). `owed_conditions!` is the flags and the probe.
macro_rules! owed_flags {
    () => {
        concat!(
            " AND NOT s.is_paid",
            " AND s.paused IS NOT TRUE",
            " AND (s.paused_until IS NULL OR s.paused_until < $1)"
        )
    };
}
pub(crate) use owed_flags;

macro_rules! gap_probe {
    () => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.invoice_id = s.invoice_id::text",
            " AND g.status IN ('sent', 'sending')",
            " AND g.created_at >= (($1::date - $2::int + 1)::timestamp AT TIME ZONE $3) OFFSET 0)"
        )
    };
}
pub(crate) use gap_probe;

macro_rules! gap_anti {
    () => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.invoice_id = s.invoice_id::text",
            " AND g.status IN ('sent', 'sending')",
            " AND g.created_at >= (($1::date - $2::int + 1)::timestamp AT TIME ZONE $3))"
        )
    };
}
pub(crate) use gap_anti;

macro_rules! owed_conditions {
    () => {
        concat!(
            $crate::db::invoices::owed_flags!(),
            $crate::db::invoices::gap_probe!()
        )
    };
}
pub(crate) use owed_conditions;

/// Binds `$1`-`$3` of a statement that uses [`owed_conditions!`]; its own
/// parameters follow from `$4`.
macro_rules! bind_owed {
    ($query:expr, $owed:expr) => {{
        let owed: $crate::db::invoices::Owed<'_> = $owed;
        $query
            .bind(owed.today)
            .bind(i64::from(owed.min_days_between))
            .bind(owed.timezone)
    }};
}
pub(crate) use bind_owed;

/// The source's columns as [`SourceRow`] reads them, from the row `s`, as
/// they are: text columns cast (a view may expose varchar or an integer
/// invoice number), NULLs kept, so a broken row is seen as broken.
macro_rules! source_columns {
    () => {
        concat!(
            "s.invoice_id::text AS invoice_id,",
            " s.invoice_number::text AS number,",
            " {amount},",
            " s.currency::text AS currency,",
            " s.due_date,",
            " NULLIF(s.payment_url::text, '') AS payment_url,",
            " s.customer_name::text AS customer_name,",
            " s.email::text AS customer_email,",
            " NULLIF(s.locale::text, '') AS customer_locale,",
            " {customer} AS customer_id"
        )
    };
}
pub(crate) use source_columns;

/// One source row, as [`source_columns!`] selects it: untrusted, any
/// column may be NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq, FromRow)]
pub struct SourceRow {
    pub invoice_id: Option<InvoiceId>,
    pub number: Option<String>,
    pub amount_minor: Option<i64>,
    pub amount_major: Option<String>,
    pub currency: Option<String>,
    pub due_date: Option<NaiveDate>,
    pub payment_url: Option<String>,
    pub customer_name: Option<String>,
    pub customer_email: Option<String>,
    pub customer_locale: Option<String>,
    /// The source's `customer_id` in customer mode; None in invoice mode.
    pub customer_id: Option<String>,
}

impl SourceRow {
    /// The problem `problem` of this row, with `detail`.
    pub fn problem(&self, problem: Problem, detail: impl Into<String>) -> SourceProblem {
        SourceProblem {
            invoice_id: self.invoice_id.clone(),
            invoice_number: self.number.clone(),
            problem,
            detail: detail.into(),
        }
    }

    /// The invoice and customer of a row that has every column a reminder
    /// needs (a key, an email, a due date, a currency and an amount); the
    /// first NULL among them is the problem. Values are not checked here
    /// (`crate::problems` does).
    pub fn into_parts(self) -> Result<(Invoice, Customer), SourceProblem> {
        let missing = |row: &Self, column: &str| {
            row.problem(Problem::MissingField, format!("{column} is NULL"))
        };
        let Some(id) = self.invoice_id.clone() else {
            return Err(self.problem(Problem::NullKey, "invoice_id is NULL"));
        };
        let Some(email) = self.customer_email.clone() else {
            return Err(missing(&self, "email"));
        };
        let Some(due_date) = self.due_date else {
            return Err(missing(&self, "due_date"));
        };
        let Some(currency) = self.currency.clone() else {
            return Err(missing(&self, "currency"));
        };
        if self.amount_minor.is_none() && self.amount_major.is_none() {
            return Err(missing(&self, "the amount"));
        }
        let amount = Amount::from_columns(self.amount_minor, self.amount_major);
        Ok((
            Invoice {
                id,
                number: self.number.unwrap_or_default(),
                amount,
                currency,
                due_date,
                payment_url: self.payment_url,
            },
            Customer {
                name: self.customer_name.unwrap_or_default(),
                email,
                locale: self.customer_locale,
                id: self.customer_id,
            },
        ))
    }
}

/// The scan's page statement: the page after `($8, $9)` (NULL for the
/// first page, which then starts at the window's start).
///
/// The inner query takes the next `$7` unpaid rows of the window in index
/// order and nothing else; whether each one owes the step is decided only
/// for those rows, in the outer query. The `LIMIT` keeps PostgreSQL from
/// pushing the per-row probes into the scan, where a misestimate of their
/// cost (stale `reminders` statistics mid-backlog) made it prefer driving
/// the view from `customers` and sorting the whole window: 0.5-0.8 s a page
/// at 100k, measured. A page therefore costs the same whether its rows owe
/// a reminder or not, and may return fewer owed rows than it examined.
///
/// The keyset condition is a plain row comparison with constants (the
/// `COALESCE`s of parameters), so it is an index condition, never a filter:
/// otherwise every page would scan the window from its start (quadratic
/// over a backlog). One statement serves every page.
const PAGE: &str = concat!(
    "SELECT ",
    source_columns!(),
    ", (s.paused IS NOT TRUE",
    owed_conditions!(),
    " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders r",
    " WHERE r.invoice_id = s.invoice_id::text AND r.period = $6 OFFSET 0)) AS owes",
    " FROM (SELECT s.* FROM {src} s",
    " WHERE s.due_date >= COALESCE($4, '-infinity'::date) AND s.due_date <= $5",
    " AND (s.due_date, s.invoice_id::text COLLATE \"C\")",
    " > (COALESCE($8, '-infinity'::date), COALESCE($9, ''))",
    " AND NOT s.is_paid AND s.invoice_id IS NOT NULL",
    " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $7) s",
    " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\""
);

/// One page of the scan: the rows that owe the window's step, and where
/// the next page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwedPage {
    /// The examined rows that owe the step, in `(due_date, id)` order, as
    /// the source has them (unchecked).
    pub owed: Vec<SourceRow>,
    /// The last row examined: the next page starts after it. None: the
    /// window has no unpaid invoice after `after`.
    pub last: Option<OverdueKey>,
    /// How many rows were examined; fewer than the limit means the window
    /// is done.
    pub examined: usize,
}

#[derive(FromRow)]
struct PageRow {
    owes: Option<bool>,
    #[sqlx(flatten)]
    row: SourceRow,
}

/// The next `limit` unpaid rows of `window` after `after`, in
/// `(due_date, id)` order, and which of them owe its step.
pub async fn fetch_owed_page(
    db: &Db,
    window: &Window,
    owed: Owed<'_>,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<OwedPage, sqlx::Error> {
    let rows: Vec<PageRow> = on_db!(db, |c| {
        bind_owed!(sqlx::query_as(db.sql(PAGE)).persistent(db.named()), owed)
            .bind(window.due_from)
            .bind(window.due_to)
            .bind(&window.step.key)
            .bind(i64::from(limit))
            .bind(after.as_ref().map(|k| k.due_date))
            .bind(after.as_ref().map(|k| k.id.clone()))
            .fetch_all(&mut *c)
            .await
    })?;
    let examined = rows.len();
    // Rows are in the window with a key: neither is NULL.
    let last = rows.iter().rev().find_map(|r| {
        Some(OverdueKey {
            due_date: r.row.due_date?,
            id: r.row.invoice_id.clone()?,
        })
    });
    let owed = rows
        .into_iter()
        .filter(|r| r.owes == Some(true))
        .map(|r| r.row)
        .collect();
    Ok(OwedPage {
        owed,
        last,
        examined,
    })
}

/// `EXPLAIN (FORMAT JSON, VERBOSE)` of a page after the first of `window`
/// (the statement a backlog runs most), with today's parameters.
pub async fn explain_owed_page(
    db: &Db,
    window: &Window,
    owed: Owed<'_>,
    limit: u32,
) -> Result<serde_json::Value, sqlx::Error> {
    let sql = db.sql(&format!("EXPLAIN (FORMAT JSON, VERBOSE) {PAGE}"));
    let plan: serde_json::Value = on_db!(db, |c| bind_owed!(
        sqlx::query_scalar(sql).persistent(false),
        owed
    )
    .bind(window.due_from)
    .bind(window.due_to)
    .bind(&window.step.key)
    .bind(i64::from(limit))
    .bind(window.due_from)
    .bind("")
    .fetch_one(&mut *c)
    .await)?;
    Ok(plan)
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

/// Windows as three parallel arrays for `unnest`.
pub(crate) fn window_arrays(
    windows: &[Window],
) -> (Vec<String>, Vec<Option<NaiveDate>>, Vec<NaiveDate>) {
    (
        windows.iter().map(|w| w.step.key.clone()).collect(),
        windows.iter().map(|w| w.due_from).collect(),
        windows.iter().map(|w| w.due_to).collect(),
    )
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
