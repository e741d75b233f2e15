//! Reading the invoices that owe a reminder today.
//!
//! An unpaid invoice owes its **due step** (`crate::stages`) unless it is
//! paused (`customers.reminders_paused`, `invoices.reminders_paused_until >=
//! today`), already has a row for that step, or had a reminder `sent` or
//! `sending` within `reminders.min_days_between` days. For one day the due
//! step is a function of the due date, so each step is one due-date range
//! ([`Window`]) and a scan is keyset pages over the partial index
//! `invoices_unpaid_due_date_id`, range by range: one index range scan per
//! page, paid invoices never visited, the cost growing with unpaid invoices,
//! not with the ledger.
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
use crate::domain::{Customer, Invoice, InvoiceId};
use crate::stages::Window;

/// Position of the last row of a page; the next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
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

/// The conditions shared by the scan and the claim; `$T` today, `$G` the
/// gap in days, `$Z` the time zone. Kept textual so both statements apply
/// exactly the same rule.
macro_rules! owed_conditions {
    ($t:literal, $g:literal, $z:literal) => {
        concat!(
            " AND i.paid_at IS NULL",
            " AND (i.reminders_paused_until IS NULL OR i.reminders_paused_until < $", $t, ")",
            " AND NOT EXISTS (SELECT 1 FROM customers pc WHERE pc.id = i.customer_id AND pc.reminders_paused OFFSET 0)",
            " AND NOT EXISTS (SELECT 1 FROM reminders g WHERE g.invoice_id = i.id",
            " AND g.status IN ('sent', 'sending')",
            " AND g.created_at >= (($", $t, "::date - $", $g, "::int + 1)::timestamp AT TIME ZONE $", $z, ") OFFSET 0)"
        )
    };
}
pub(crate) use owed_conditions;

/// One page of invoices in `window` that owe its step, in `(due_date, id)`
/// order, starting after `after`.
pub async fn fetch_owed_page(
    db: &Db,
    window: &Window,
    owed: Owed<'_>,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<Vec<OverdueKey>, sqlx::Error> {
    // Two statements rather than `$7 IS NULL OR (due_date, id) > ...`: the
    // row comparison must be a plain index condition, or every page would
    // scan the window from its start (quadratic over a backlog).
    macro_rules! page {
        ($after:literal) => {
            concat!(
                "SELECT i.due_date, i.id FROM invoices i",
                " WHERE i.due_date >= COALESCE($1, '-infinity'::date) AND i.due_date <= $2",
                $after,
                " AND NOT EXISTS (SELECT 1 FROM reminders r WHERE r.invoice_id = i.id AND r.period = $3 OFFSET 0)",
                owed_conditions!("4", "5", "6"),
                " ORDER BY i.due_date, i.id LIMIT $7"
            )
        };
    }
    on_db!(db, |c| {
        let query = match after {
            None => sqlx::query_as(page!("")),
            Some(_) => sqlx::query_as(page!(" AND (i.due_date, i.id) > ($8, $9)")),
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
        let query = match after {
            None => query,
            Some(key) => query.bind(key.due_date).bind(key.id),
        };
        query.fetch_all(&mut *c).await
    })
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
    const FROM: &str = concat!(
        " FROM unnest($1::text[], $2::date[], $3::date[]) AS w(key, due_from, due_to)",
        " JOIN invoices i ON i.due_date >= COALESCE(w.due_from, '-infinity'::date) AND i.due_date <= w.due_to",
        " JOIN customers cu ON cu.id = i.customer_id",
        " LEFT JOIN reminders r ON r.invoice_id = i.id AND r.period = w.key",
        " WHERE (r.id IS NULL OR (r.status = 'failed' AND r.attempts < $7))",
        owed_conditions!("4", "5", "6"),
    );
    let (keys, froms, tos) = window_arrays(windows);
    let list = format!(
        "SELECT i.id AS invoice_id, i.number, cu.email AS customer_email, i.due_date, w.key AS step,
                CASE WHEN r.id IS NULL THEN 'new' ELSE 'retry' END AS kind
         {FROM} ORDER BY i.due_date, i.id LIMIT $8"
    );
    let count = format!("SELECT count(*) {FROM}");
    on_db!(db, |c| {
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(list.clone()))
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
        let total = sqlx::query_scalar(sqlx::AssertSqlSafe(count.clone()))
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

/// One invoice and its customer, for `preview`.
pub async fn invoice_with_customer(
    db: &Db,
    id: InvoiceId,
) -> Result<Option<(Invoice, Customer)>, sqlx::Error> {
    type Row = (
        InvoiceId,
        String,
        i64,
        String,
        NaiveDate,
        String,
        String,
        Option<String>,
    );
    let row: Option<Row> = on_db!(db, |c| {
        sqlx::query_as(
        "SELECT i.id, i.number, i.amount_cents, i.currency, i.due_date, c.name, c.email, c.locale
           FROM invoices i JOIN customers c ON c.id = i.customer_id WHERE i.id = $1",
    )
    .persistent(db.named())
    .bind(id)
    .fetch_optional(&mut *c)
    .await
    })?;
    Ok(row.map(
        |(id, number, amount_cents, currency, due_date, name, email, locale)| {
            (
                Invoice {
                    id,
                    number,
                    amount_cents,
                    currency,
                    due_date,
                },
                Customer {
                    name,
                    email,
                    locale,
                },
            )
        },
    ))
}
