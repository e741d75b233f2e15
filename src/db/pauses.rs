//! Pauses set in the console (`console_pauses`): what is paused, by whom,
//! when and why. The tick reads them only through `owing::owes_flags!`;
//! this module reads one for `explain` and writes them for the console
//! (each write in one transaction with its activity record, called from
//! `db::console`).

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::hold_active;
use super::params::Params;
use super::payments::PaymentHold;
use crate::domain::InvoiceId;
use sqlx::types::Json;

/// What a console pause holds back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paused<'a> {
    /// One invoice, by the source's key.
    Invoice(&'a str),
    /// Every invoice of a customer (customer mode).
    Customer(&'a str),
}

impl Paused<'_> {
    /// `invoice 42` / `customer C-7`, as the activity log names it.
    pub fn subject(&self) -> String {
        match self {
            Self::Invoice(id) => format!("invoice {id}"),
            Self::Customer(id) => format!("customer {id}"),
        }
    }
}

/// A pause as stored.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize, serde::Deserialize)]
pub struct ConsolePause {
    /// Set when the invoice itself is paused.
    pub invoice_id: Option<String>,
    /// Set when its customer is paused.
    pub customer_id: Option<String>,
    pub reason: String,
    pub paused_by: String,
    pub paused_at: DateTime<Utc>,
}

/// What holds back the invoices `ids` and `customer`, in one statement:
/// the console pauses of the invoices and of the customer (an invoice is
/// held back by its own before its customer's, [`holding`]), and the
/// invoices' payment holds (`db::payments`).
pub async fn find(
    db: &Db,
    ids: &[InvoiceId],
    customer: Option<&str>,
) -> Result<(Vec<ConsolePause>, Vec<PaymentHold>), sqlx::Error> {
    let query = db.statement(concat!(
        "SELECT (SELECT coalesce(json_agg(p), '[]') FROM (",
        "SELECT invoice_id, customer_id, reason, paused_by, paused_at FROM {ir}.console_pauses",
        " WHERE invoice_id = ANY($ids) OR customer_id = $customer) p),",
        " (SELECT coalesce(json_agg(h), '[]') FROM (",
        "SELECT h.invoice_id, h.object_id, h.state, h.provider, h.event_id, h.event_at,",
        " h.expires_at, h.changed_at, h.lifted_by, (",
        hold_active!("h"),
        ") AS active FROM {ir}.payment_holds h WHERE h.invoice_id = ANY($ids)",
        " ORDER BY h.invoice_id, h.event_at, h.object_id) h)"
    ));
    let customer = customer.map(str::to_owned);
    let params = Params::new().with("ids", &ids).with("customer", &customer);
    let (Json(pauses), Json(holds)): (Json<Vec<ConsolePause>>, Json<Vec<PaymentHold>>) =
        on_db!(db, |c| query.fetch_one(&mut *c, &params).await)?;
    Ok((pauses, holds))
}

/// Among `pauses`, the one that holds invoice `id` back: its own, else
/// its customer's.
pub fn holding<'p>(pauses: &'p [ConsolePause], id: &InvoiceId) -> Option<&'p ConsolePause> {
    pauses
        .iter()
        .find(|p| p.invoice_id.as_deref() == Some(id.as_str()))
        .or_else(|| {
            pauses
                .iter()
                .find(|p| p.invoice_id.is_none() && p.customer_id.is_some())
        })
}

/// The pause of customer `customer` itself, if any.
pub async fn of_customer(db: &Db, customer: &str) -> Result<Option<ConsolePause>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT invoice_id, customer_id, reason, paused_by, paused_at FROM {ir}.console_pauses
          WHERE customer_id = $1"
    ))
    .persistent(db.named())
    .bind(customer)
    .fetch_optional(&mut *c)
    .await)
}

/// Pauses `what` (or replaces the reason of its pause) on `c`.
pub(super) async fn pause_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    what: &Paused<'_>,
    reason: &str,
    by: &str,
) -> Result<(), sqlx::Error> {
    let sql = match what {
        Paused::Invoice(_) => {
            "INSERT INTO {ir}.console_pauses (invoice_id, reason, paused_by) VALUES ($1, $2, $3)
             ON CONFLICT (invoice_id) WHERE invoice_id IS NOT NULL
             DO UPDATE SET reason = EXCLUDED.reason, paused_by = EXCLUDED.paused_by, paused_at = now()"
        }
        Paused::Customer(_) => {
            "INSERT INTO {ir}.console_pauses (customer_id, reason, paused_by) VALUES ($1, $2, $3)
             ON CONFLICT (customer_id) WHERE customer_id IS NOT NULL
             DO UPDATE SET reason = EXCLUDED.reason, paused_by = EXCLUDED.paused_by, paused_at = now()"
        }
    };
    let (Paused::Invoice(key) | Paused::Customer(key)) = what;
    sqlx::query(db.sql(sql))
        .persistent(db.named())
        .bind(key)
        .bind(reason)
        .bind(by)
        .execute(&mut *c)
        .await
        .map(|_| ())
}

/// Ends the pause of `what` on `c`; false if it was not paused.
pub(super) async fn unpause_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    what: &Paused<'_>,
) -> Result<bool, sqlx::Error> {
    let sql = match what {
        Paused::Invoice(_) => "DELETE FROM {ir}.console_pauses WHERE invoice_id = $1",
        Paused::Customer(_) => "DELETE FROM {ir}.console_pauses WHERE customer_id = $1",
    };
    let (Paused::Invoice(key) | Paused::Customer(key)) = what;
    sqlx::query(db.sql(sql))
        .persistent(db.named())
        .bind(key)
        .execute(&mut *c)
        .await
        .map(|done| done.rows_affected() > 0)
}
