//! Reading overdue invoices.
//!
//! An invoice is overdue when it is unpaid and `due_date + grace_days <
//! today`, i.e. `due_date < cutoff` with `cutoff = today - grace_days`.
//! Pages are keyset-paginated on `(due_date, id)`, the order of the partial
//! index `invoices_unpaid_due_date_id`: each page is one index range scan,
//! whatever the page number, and paid invoices are never visited.
//!
//! The "no reminder yet" test is a per-row probe of the UNIQUE (invoice_id,
//! period) index, kept that way with `OFFSET 0`: otherwise PostgreSQL may
//! turn it into an anti-join planned from `reminders` statistics, and those
//! are stale exactly when it matters (the table grows by a whole backlog
//! within one tick); a plan that rescans `reminders` for every page makes
//! the tick quadratic.

use chrono::NaiveDate;
use sqlx::{FromRow, PgPool};

use crate::domain::InvoiceId;

/// Position of the last row of a page; the next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct OverdueKey {
    pub due_date: NaiveDate,
    pub id: InvoiceId,
}

/// One page of overdue invoices that have no reminder for `period` yet,
/// in `(due_date, id)` order, starting after `after`.
pub async fn fetch_overdue_page(
    pool: &PgPool,
    cutoff: NaiveDate,
    period: &str,
    after: Option<OverdueKey>,
    limit: u32,
) -> Result<Vec<OverdueKey>, sqlx::Error> {
    match after {
        None => {
            sqlx::query_as(
                "SELECT i.due_date, i.id
                   FROM invoices i
                  WHERE i.paid_at IS NULL
                    AND i.due_date < $1
                    AND NOT EXISTS (SELECT 1 FROM reminders r
                                     WHERE r.invoice_id = i.id AND r.period = $2
                                    OFFSET 0)
                  ORDER BY i.due_date, i.id
                  LIMIT $3",
            )
            .bind(cutoff)
            .bind(period)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await
        }
        Some(key) => {
            sqlx::query_as(
                "SELECT i.due_date, i.id
                   FROM invoices i
                  WHERE i.paid_at IS NULL
                    AND i.due_date < $1
                    AND (i.due_date, i.id) > ($4, $5)
                    AND NOT EXISTS (SELECT 1 FROM reminders r
                                     WHERE r.invoice_id = i.id AND r.period = $2
                                    OFFSET 0)
                  ORDER BY i.due_date, i.id
                  LIMIT $3",
            )
            .bind(cutoff)
            .bind(period)
            .bind(i64::from(limit))
            .bind(key.due_date)
            .bind(key.id)
            .fetch_all(pool)
            .await
        }
    }
}

/// Number of overdue invoices (for `status` and dry runs).
pub async fn count_overdue(pool: &PgPool, cutoff: NaiveDate) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM invoices WHERE paid_at IS NULL AND due_date < $1")
        .bind(cutoff)
        .fetch_one(pool)
        .await
}

/// A reminder the next tick would attempt (for `run-once --dry-run`).
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct DueReminder {
    pub invoice_id: InvoiceId,
    pub number: String,
    pub customer_email: String,
    pub due_date: NaiveDate,
    pub amount_cents: i64,
    pub currency: String,
    /// `new`, or `retry` for a `failed` reminder with attempts left.
    pub kind: String,
}

/// Overdue invoices owed a reminder for `period`: no row yet, or a
/// `failed` row with attempts left. Read-only.
pub async fn preview_due(
    pool: &PgPool,
    cutoff: NaiveDate,
    period: &str,
    max_attempts: u32,
    limit: u32,
) -> Result<Vec<DueReminder>, sqlx::Error> {
    sqlx::query_as(
        "SELECT i.id AS invoice_id, i.number, c.email AS customer_email, i.due_date,
                i.amount_cents, i.currency,
                CASE WHEN r.id IS NULL THEN 'new' ELSE 'retry' END AS kind
           FROM invoices i
           JOIN customers c ON c.id = i.customer_id
           LEFT JOIN reminders r ON r.invoice_id = i.id AND r.period = $2
          WHERE i.paid_at IS NULL AND i.due_date < $1
            AND (r.id IS NULL OR (r.status = 'failed' AND r.attempts < $3))
          ORDER BY i.due_date, i.id
          LIMIT $4",
    )
    .bind(cutoff)
    .bind(period)
    .bind(i64::from(max_attempts))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
}
