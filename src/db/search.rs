//! The console's search: the source's invoices whose id, number, or
//! address is the query, and in customer mode the unpaid invoices of the
//! customer it names; each lookup a probe of an index on the default
//! source's tables (`invoices_key`, `invoices_number`,
//! `invoices_unpaid_customer_key`, `customers_email_lower`), the query
//! bound, at most `limit` invoices.

use sqlx::FromRow;

use super::Db;
use super::conn::on_db;

/// An invoice the search found.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct Found {
    pub invoice_id: String,
    pub invoice_number: Option<String>,
    /// Customer mode only.
    pub customer_id: Option<String>,
    pub email: Option<String>,
}

/// The invoices `query` names exactly (the address case-insensitively;
/// a customer id: its unpaid invoices), by invoice id, at most `limit`.
pub async fn find(db: &Db, query: &str, limit: i64) -> Result<Vec<Found>, sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query_as(db.sql(
        "SELECT DISTINCT f.invoice_id, f.invoice_number, f.customer_id, f.email FROM (
           (SELECT s.invoice_id::text AS invoice_id, s.invoice_number, {customer} AS customer_id, s.email
              FROM {src} s WHERE s.invoice_id::text = $1 LIMIT $2)
           UNION ALL
           (SELECT s.invoice_id::text, s.invoice_number, {customer}, s.email
              FROM {src} s WHERE s.invoice_number = $1 LIMIT $2)
           UNION ALL
           (SELECT s.invoice_id::text, s.invoice_number, {customer}, s.email
              FROM {src} s WHERE {customer} = $1 AND NOT s.is_paid LIMIT $2)
           UNION ALL
           (SELECT s.invoice_id::text, s.invoice_number, {customer}, s.email
              FROM {src} s WHERE lower(s.email) = lower($1) LIMIT $2)
         ) f WHERE f.invoice_id IS NOT NULL ORDER BY f.invoice_id LIMIT $2"
    ))
    .persistent(db.named())
    .bind(query)
    .bind(limit)
    .fetch_all(&mut *c)
    .await
    })
}
