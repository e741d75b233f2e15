//! Pauses set in the console (`console_pauses`): what is paused, by whom,
//! when and why. The tick reads them only through `owing::owes_flags!`;
//! this module reads one for `explain` and writes them for the console
//! (each write in one transaction with its activity record, called from
//! `db::console`).

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::activity::{NewActivity, record_on};
use super::conn::on_db;
use crate::domain::InvoiceId;

/// What a console pause keeps back.
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

/// Among `pauses`, the one that keeps invoice `id` back: its own, else
/// its customer's.
pub fn pausing<'p>(pauses: &'p [ConsolePause], id: &InvoiceId) -> Option<&'p ConsolePause> {
    pauses
        .iter()
        .find(|p| p.invoice_id.as_deref() == Some(id.as_str()))
        .or_else(|| {
            pauses
                .iter()
                .find(|p| p.invoice_id.is_none() && p.customer_id.is_some())
        })
}

/// Pauses `what` in the console (or replaces its reason) with `activity`,
/// in one transaction.
pub async fn pause(
    db: &Db,
    what: &Paused<'_>,
    activity: &NewActivity<'_>,
) -> Result<(), sqlx::Error> {
    on_db!(db, tx, |c| async {
        let reason = activity.reason.unwrap_or_default();
        pause_on(c, db, what, reason, activity.user_name).await?;
        record_on(c, db, activity, &[]).await
    }
    .await)
}

/// Ends the console pause of `what` with `activity`, in one transaction;
/// false (and no record) if it was not paused.
pub async fn unpause(
    db: &Db,
    what: &Paused<'_>,
    activity: &NewActivity<'_>,
) -> Result<bool, sqlx::Error> {
    on_db!(db, tx, |c| async {
        let removed = unpause_on(c, db, what).await?;
        if removed {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(removed)
    }
    .await)
}

/// Pauses `what` (or replaces the reason of its pause) on `c`.
async fn pause_on(
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
async fn unpause_on(
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
