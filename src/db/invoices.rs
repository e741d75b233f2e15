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
//! The "no reminder yet" and "recently reminded" tests are per-row probes of
//! the UNIQUE (invoice_id, period) index, kept that way with `OFFSET 0`:
//! otherwise PostgreSQL may plan an anti-join from `reminders` statistics,
//! which are stale exactly when it matters (the table grows by a whole
//! backlog within one tick), and rescan `reminders` for every page.

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use crate::domain::{Amount, Customer, Invoice, InvoiceId};
use crate::stages::Window;

/// Position of the last row of a page; the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct OverdueKey {
    pub due_date: NaiveDate,
    pub id: InvoiceId,
}

/// What, besides its due step, decides whether an invoice owes a reminder
/// today.
#[derive(Debug, Clone, Copy)]
pub struct Owed<'a> {
    /// The database's date in `schedule.timezone`.
    pub today: NaiveDate,
    /// `schedule.timezone`, for "created on which day".
    pub timezone: &'a str,
    pub min_days_between: u32,
}

/// The conditions shared by the scan and the claim, over the source row
/// `s`; `$T` today, `$G` the gap in days, `$Z` the time zone. Kept textual
/// so both statements apply exactly the same rule.
macro_rules! owed_conditions {
    ($t:literal, $g:literal, $z:literal) => {
        concat!(
            " AND NOT s.is_paid",
            " AND s.paused IS NOT TRUE",
            " AND (s.paused_until IS NULL OR s.paused_until < $", $t, ")",
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.invoice_id = s.invoice_id::text",
            " AND g.status IN ('sent', 'sending')",
            " AND g.created_at >= (($", $t, "::date - $", $g, "::int + 1)::timestamp AT TIME ZONE $", $z, ") OFFSET 0)"
        )
    };
}
pub(crate) use owed_conditions;

/// The source's columns as [`SourceRow`] reads them, from the row `s`.
/// Text columns are cast (a view may expose varchar or an integer
/// invoice number) and NULL text becomes empty, so one odd row is a
/// reminder discarded with its reason, not a failed batch.
macro_rules! source_columns {
    () => {
        concat!(
            "s.invoice_id::text AS invoice_id,",
            " COALESCE(s.invoice_number::text, '') AS number,",
            " {amount},",
            " COALESCE(s.currency::text, '') AS currency,",
            " s.due_date,",
            " NULLIF(s.payment_url::text, '') AS payment_url,",
            " COALESCE(s.customer_name::text, '') AS customer_name,",
            " COALESCE(s.email::text, '') AS customer_email,",
            " NULLIF(s.locale::text, '') AS customer_locale"
        )
    };
}
pub(crate) use source_columns;

/// One source row, as [`source_columns!`] selects it.
#[derive(Debug, Clone, FromRow)]
pub struct SourceRow {
    pub invoice_id: InvoiceId,
    pub number: String,
    pub amount_minor: Option<i64>,
    pub amount_major: Option<String>,
    pub currency: String,
    pub due_date: NaiveDate,
    pub payment_url: Option<String>,
    pub customer_name: String,
    pub customer_email: String,
    pub customer_locale: Option<String>,
}

impl SourceRow {
    pub fn into_parts(self) -> (Invoice, Customer) {
        (
            Invoice {
                id: self.invoice_id,
                number: self.number,
                amount: Amount::from_columns(self.amount_minor, self.amount_major),
                currency: self.currency,
                due_date: self.due_date,
                payment_url: self.payment_url,
            },
            Customer {
                name: self.customer_name,
                email: self.customer_email,
                locale: self.customer_locale,
            },
        )
    }
}

/// The scan's page statement: the first page, or (with the keyset
/// condition as `$after`) a page after `($8, $9)`.
///
/// The inner query takes the next `$7` unpaid keys of the window in index
/// order and nothing else; whether each one owes the step is decided only
/// for those rows, in the outer query. The `LIMIT` keeps PostgreSQL from
/// pushing the per-row probes into the scan, where a misestimate of their
/// cost (stale `reminders` statistics mid-backlog) made it prefer driving
/// the view from `customers` and sorting the whole window: 0.5-0.8 s a page
/// at 100k, measured. A page therefore costs the same whether its rows owe
/// a reminder or not, and may return fewer owed rows than it examined.
macro_rules! page {
    ($after:literal) => {
        concat!(
            "SELECT s.due_date, s.invoice_id AS id, (s.paused IS NOT TRUE",
            owed_conditions!("4", "5", "6"),
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders r",
            " WHERE r.invoice_id = s.invoice_id AND r.period = $3 OFFSET 0)) AS owes",
            " FROM (SELECT s.due_date, s.invoice_id::text AS invoice_id, s.is_paid, s.paused, s.paused_until",
            " FROM {src} s",
            " WHERE s.due_date >= COALESCE($1, '-infinity'::date) AND s.due_date <= $2",
            $after,
            " AND NOT s.is_paid",
            " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $7) s",
            " ORDER BY s.due_date, s.invoice_id COLLATE \"C\""
        )
    };
}

/// One page of the scan: the keys that owe the window's step, and where
/// the next page starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwedPage {
    /// The examined keys that owe the step, in `(due_date, id)` order.
    pub owed: Vec<OverdueKey>,
    /// The last key examined: the next page starts after it. None: the
    /// window has no unpaid invoice after `after`.
    pub last: Option<OverdueKey>,
    /// How many keys were examined; fewer than the limit means the window
    /// is done.
    pub examined: usize,
}

#[derive(FromRow)]
struct PageRow {
    due_date: NaiveDate,
    id: InvoiceId,
    owes: Option<bool>,
}

/// The next `limit` unpaid invoices of `window` after `after`, in
/// `(due_date, id)` order, and which of them owe its step.
pub async fn fetch_owed_page(
    db: &Db,
    window: &Window,
    owed: Owed<'_>,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<OwedPage, sqlx::Error> {
    // Two statements rather than `$7 IS NULL OR (due_date, id) > ...`: the
    // row comparison must be a plain index condition, or every page would
    // scan the window from its start (quadratic over a backlog).
    let rows: Vec<PageRow> = on_db!(db, |c| {
        let query = match &after {
            None => sqlx::query_as(db.sql(page!(""))),
            Some(_) => sqlx::query_as(db.sql(page!(
                " AND (s.due_date, s.invoice_id::text COLLATE \"C\") > ($8, $9)"
            ))),
        };
        let query = query
            .persistent(db.named())
            .bind(window.due_from)
            .bind(window.due_to)
            .bind(&window.step.key)
            .bind(owed.today)
            .bind(i64::from(owed.min_days_between))
            .bind(owed.timezone)
            .bind(i64::from(limit));
        let query = match &after {
            None => query,
            Some(key) => query.bind(key.due_date).bind(key.id.clone()),
        };
        query.fetch_all(&mut *c).await
    })?;
    let examined = rows.len();
    let last = rows.last().map(|r| OverdueKey {
        due_date: r.due_date,
        id: r.id.clone(),
    });
    let owed = rows
        .into_iter()
        .filter(|r| r.owes == Some(true))
        .map(|r| OverdueKey {
            due_date: r.due_date,
            id: r.id,
        })
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
    let sql = db.sql(concat!(
        "EXPLAIN (FORMAT JSON, VERBOSE) ",
        page!(" AND (s.due_date, s.invoice_id::text COLLATE \"C\") > ($8, $9)")
    ));
    let plan: serde_json::Value = on_db!(db, |c| sqlx::query_scalar(sql)
        .persistent(false)
        .bind(window.due_from)
        .bind(window.due_to)
        .bind(&window.step.key)
        .bind(owed.today)
        .bind(i64::from(owed.min_days_between))
        .bind(owed.timezone)
        .bind(i64::from(limit))
        .bind(window.due_from.unwrap_or(chrono::NaiveDate::MIN))
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

/// An invoice owed a reminder today (for `run-once --dry-run` and `audit`).
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct OwedReminder {
    pub invoice_id: InvoiceId,
    pub number: String,
    pub customer_email: String,
    pub due_date: NaiveDate,
    /// The step it owes.
    pub step: String,
    /// `new`, or `retry` for a `failed` row of that step with attempts left.
    pub kind: String,
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

/// Every invoice that owes its due step today, as a new claim or (with
/// `max_attempts`) as a retry of a `failed` row, in `(due_date, id)` order;
/// at most `limit`, and how many there are in all. Read-only.
pub async fn owed_now(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    max_attempts: Option<u32>,
    limit: u32,
) -> Result<(Vec<OwedReminder>, i64), sqlx::Error> {
    let max_attempts = max_attempts.unwrap_or(0);
    macro_rules! from {
        () => {
            concat!(
                " FROM unnest($1::text[], $2::date[], $3::date[]) AS w(key, due_from, due_to)",
                " JOIN {src} s ON s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to",
                " LEFT JOIN {ir}.reminders r ON r.invoice_id = s.invoice_id::text AND r.period = w.key",
                " WHERE (r.id IS NULL OR (r.status = 'failed' AND r.attempts < $7))",
                owed_conditions!("4", "5", "6"),
            )
        };
    }
    let (keys, froms, tos) = window_arrays(windows);
    let list = db.sql(concat!(
        "SELECT s.invoice_id::text AS invoice_id, COALESCE(s.invoice_number::text, '') AS number,",
        " COALESCE(s.email::text, '') AS customer_email, s.due_date, w.key AS step,",
        " CASE WHEN r.id IS NULL THEN 'new' ELSE 'retry' END AS kind",
        from!(),
        " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\" LIMIT $8"
    ));
    let count = db.sql(concat!("SELECT count(*)", from!()));
    on_db!(db, |c| {
        let rows = sqlx::query_as(list)
            .persistent(db.named())
            .bind(&keys)
            .bind(&froms)
            .bind(&tos)
            .bind(owed.today)
            .bind(i64::from(owed.min_days_between))
            .bind(owed.timezone)
            .bind(i64::from(max_attempts))
            .bind(i64::from(limit))
            .fetch_all(&mut *c)
            .await?;
        let total = sqlx::query_scalar(count)
            .persistent(db.named())
            .bind(&keys)
            .bind(&froms)
            .bind(&tos)
            .bind(owed.today)
            .bind(i64::from(owed.min_days_between))
            .bind(owed.timezone)
            .bind(i64::from(max_attempts))
            .fetch_one(&mut *c)
            .await?;
        Ok::<_, sqlx::Error>((rows, total))
    })
}

/// One invoice and its customer from the source, for `preview`.
pub async fn invoice_with_customer(
    db: &Db,
    id: &InvoiceId,
) -> Result<Option<(Invoice, Customer)>, sqlx::Error> {
    let row: Option<SourceRow> = on_db!(db, |c| {
        sqlx::query_as(db.sql(concat!(
            "SELECT ",
            source_columns!(),
            " FROM {src} s WHERE s.invoice_id::text = $1"
        )))
        .persistent(db.named())
        .bind(id)
        .fetch_optional(&mut *c)
        .await
    })?;
    Ok(row.map(SourceRow::into_parts))
}
