//! Customer mode (`reminders.group_by = "customer"`): every invoice of a
//! few customers that owes a step today, so that one mail can list them.
//!
//! The tick still finds work by scanning the step windows page by page
//! (`invoices`); for the customers a page meets, this reads all of their
//! owed invoices at once, across every step, by customer key (with the
//! source index the README advises, one index range per customer), at most
//! `max_invoices_per_mail` per customer, oldest due date first. Nothing
//! here claims: the claim re-checks every condition in its own statement.
//!
//! `min_days_between` counts per customer here: a customer who had a
//! reminder `sent` or `sending` within the gap (on any invoice claimed in
//! customer mode, `reminders.customer_id`) gets nothing.

use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::invoices::{Owed, SourceRow, bind_owed, owed_flags, source_columns, window_arrays};
use crate::stages::Window;

/// One owed invoice of a customer, with the step it owes today.
#[derive(Debug, Clone, FromRow)]
pub struct CustomerRow {
    /// The step (`reminders.period`) it owes.
    pub step: String,
    #[sqlx(flatten)]
    pub row: SourceRow,
}

/// The invoices of `customers` that owe their due step today (each step's
/// due-date range is one of `windows`), at most `per_customer` per
/// customer, oldest due date first, ordered by customer. Unchecked source
/// rows: the caller checks them, and the claim re-checks.
pub async fn owed_of_customers(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    customers: &[String],
    per_customer: u32,
) -> Result<Vec<CustomerRow>, sqlx::Error> {
    let (keys, froms, tos) = window_arrays(windows);
    // `OFFSET 0` keeps the key lookup a lookup (see `reminders::claim_batch`).
    let sql = db.sql(concat!(
        "SELECT o.* FROM (SELECT w.key AS step, ",
        source_columns!(),
        ", row_number() OVER (PARTITION BY s.customer_id::text",
        " ORDER BY s.due_date, s.invoice_id::text COLLATE \"C\") AS nth",
        " FROM (SELECT * FROM {src} s WHERE s.customer_id::text = ANY($4)",
        " AND NOT s.is_paid AND s.invoice_id IS NOT NULL OFFSET 0) s",
        " JOIN unnest($5::text[], $6::date[], $7::date[]) AS w(key, due_from, due_to)",
        " ON s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to",
        " WHERE TRUE",
        owed_flags!(),
        " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders r",
        " WHERE r.invoice_id = s.invoice_id::text AND r.period = w.key OFFSET 0)",
        " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.customer_id = s.customer_id::text",
        " AND g.status IN ('sent', 'sending')",
        " AND g.created_at >= (($1::date - $2::int + 1)::timestamp AT TIME ZONE $3) OFFSET 0)",
        ") o WHERE o.nth <= $8",
        " ORDER BY o.customer_id, o.due_date, o.invoice_id COLLATE \"C\""
    ));
    on_db!(db, |c| bind_owed!(
        sqlx::query_as(sql).persistent(db.named()),
        owed
    )
    .bind(customers)
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .bind(i64::from(per_customer))
    .fetch_all(&mut *c)
    .await)
}
