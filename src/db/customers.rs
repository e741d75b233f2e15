//! Customer mode (`reminders.group_by = "customer"`): the invoices that
//! owe a step today, read a customer at a time, so that one mail can list
//! them.
//!
//! The tick walks the source in customer order ([`fetch_customer_page`]:
//! with the source index the README advises on `(customer_id::text,
//! due_date)` over unpaid rows, one index range scan per page), so one read
//! finds all of a customer's owed invoices, whatever their steps.
//! [`owed_of_customers`] reads given customers by key (a customer whose
//! unpaid invoices fill a page alone, and `preview`), at most
//! `max_invoices_per_mail` each, oldest due date first. Nothing here
//! claims: the claim re-checks every condition in its own statement.
//!
//! `min_days_between` counts per customer here: a customer who had a
//! reminder `sent` or `sending` within the gap (on any invoice claimed in
//! customer mode, `reminders.customer_id`) gets nothing.

use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::invoices::{Owed, SourceRow, bind_owed, owed_flags, source_columns, window_arrays};
use crate::stages::Window;

/// SQL: source row `s` has no reminder for step `w.key` yet, and its
/// customer had none `sent` or `sending` within the gap (`$1` today, `$2`
/// `min_days_between`, `$3` the time zone, as [`bind_owed`] binds them):
/// `min_days_between` per customer, as both reads here apply it.
macro_rules! not_reminded {
    () => {
        concat!(
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders r",
            " WHERE r.invoice_id = s.invoice_id::text AND r.period = w.key OFFSET 0)",
            " AND NOT EXISTS (SELECT 1 FROM {ir}.reminders g WHERE g.customer_id = s.customer_id::text",
            " AND g.status IN ('sent', 'sending')",
            " AND g.created_at >= (($1::date - $2::int + 1)::timestamp AT TIME ZONE $3) OFFSET 0)"
        )
    };
}

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
        not_reminded!(),
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

/// One unpaid invoice of a customer-mode page, and the step it owes today
/// (None: it owes none, or is reminded within the gap).
#[derive(Debug, Clone, FromRow)]
struct PageRow {
    step: Option<String>,
    #[sqlx(flatten)]
    row: SourceRow,
}

/// One page of the customer-mode scan.
#[derive(Debug, Clone, Default)]
pub struct CustomerPage {
    /// The examined rows that owe a step, in `(customer, due date, key)`
    /// order, unchecked.
    pub owed: Vec<CustomerRow>,
    /// Every examined row's customer key, in the page's order (the caller
    /// cuts the page at a customer boundary).
    pub customers: Vec<String>,
}

/// The customer-mode page statement: the next `$6` unpaid rows with a key
/// and a due date on or before `$5` (the latest due date any step owes
/// today), in the order of the customer index the README advises
/// (`(customer_id::text, due_date)` over unpaid rows), after customer `$4`
/// (or, `first`, from the start); and for each, the step whose window holds
/// its due date if it owes it. As in the invoice scan (`invoices::PAGE`),
/// the inner `LIMIT` keeps the per-row probes out of the index scan.
macro_rules! customer_page {
    ($range:literal) => {
        concat!(
            "SELECT CASE WHEN w.key IS NOT NULL",
            owed_flags!(),
            not_reminded!(),
            " THEN w.key END AS step, ",
            source_columns!(),
            " FROM (SELECT s.* FROM {src} s WHERE ",
            $range,
            " AND NOT s.is_paid AND s.invoice_id IS NOT NULL",
            " AND s.due_date IS NOT NULL AND s.due_date <= $5",
            " ORDER BY s.customer_id::text, s.due_date LIMIT $6) s",
            " LEFT JOIN LATERAL (SELECT w.key FROM unnest($7::text[], $8::date[], $9::date[])",
            " AS w(key, due_from, due_to)",
            " WHERE s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to",
            " LIMIT 1) w ON TRUE",
            " ORDER BY customer_id, due_date, invoice_id COLLATE \"C\""
        )
    };
}

/// The next `limit` unpaid rows of the source in customer order, after
/// customer `after` (None: from the first), and the step each owes today
/// (`windows`). A page may end in the middle of a customer: the caller
/// reads [`CustomerPage::customers`] to cut it at a boundary. Unchecked
/// source rows: the caller checks them, and the claim re-checks.
pub async fn fetch_customer_page(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    after: Option<&str>,
    limit: u32,
) -> Result<CustomerPage, sqlx::Error> {
    let Some(due_by) = windows.iter().map(|w| w.due_to).max() else {
        return Ok(CustomerPage::default());
    };
    let (keys, froms, tos) = window_arrays(windows);
    let sql = match after {
        None => db.sql(customer_page!(
            "s.customer_id IS NOT NULL AND $4::text IS NULL"
        )),
        Some(_) => db.sql(customer_page!("s.customer_id::text > $4")),
    };
    let rows: Vec<PageRow> = on_db!(db, |c| bind_owed!(
        sqlx::query_as(sql).persistent(db.named()),
        owed
    )
    .bind(after)
    .bind(due_by)
    .bind(i64::from(limit))
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .fetch_all(&mut *c)
    .await)?;
    let mut page = CustomerPage {
        owed: Vec::new(),
        customers: Vec::with_capacity(rows.len()),
    };
    for r in rows {
        // The scan reads only rows with a customer key.
        page.customers
            .push(r.row.customer_id.clone().unwrap_or_default());
        if let Some(step) = r.step {
            page.owed.push(CustomerRow { step, row: r.row });
        }
    }
    Ok(page)
}

/// `EXPLAIN (FORMAT JSON, VERBOSE)` of a customer-mode page after the
/// first (the statement a backlog runs most), with today's parameters.
pub async fn explain_customer_page(
    db: &Db,
    windows: &[Window],
    owed: Owed<'_>,
    limit: u32,
) -> Result<serde_json::Value, sqlx::Error> {
    let due_by = windows.iter().map(|w| w.due_to).max();
    let (keys, froms, tos) = window_arrays(windows);
    let sql = db.sql(&format!(
        "EXPLAIN (FORMAT JSON, VERBOSE) {}",
        customer_page!("s.customer_id::text > $4")
    ));
    on_db!(db, |c| bind_owed!(
        sqlx::query_scalar(sql).persistent(false),
        owed
    )
    .bind("")
    .bind(due_by)
    .bind(i64::from(limit))
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .fetch_one(&mut *c)
    .await)
}
