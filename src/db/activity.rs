//! The console's activity log (`console_activity`): who changed what, and
//! why. A record is written only in the transaction of the change it
//! records, by the change's own table file (`suppressions`, `pauses`,
//! `payments`, `settle`), each taking an `Option<&NewActivity>` (None: the
//! command line's change, which the log does not keep); this file imports
//! no table.

use chrono::{DateTime, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;

/// Who did what, to be written with the change.
#[derive(Debug, Clone)]
pub struct NewActivity<'a> {
    pub user_name: &'a str,
    pub action: &'a str,
    pub subject: &'a str,
    pub reason: Option<&'a str>,
}

/// One line of the activity log.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct Activity {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub user_name: String,
    pub action: String,
    pub subject: String,
    pub reason: Option<String>,
    pub rows: Vec<i64>,
}

/// Writes `activity` on `c`, the connection of the transaction that makes
/// the change it records; `rows` are the reminders it changed.
pub(crate) async fn record_on(
    c: &mut sqlx::PgConnection,
    db: &Db,
    activity: &NewActivity<'_>,
    rows: &[i64],
) -> Result<(), sqlx::Error> {
    sqlx::query(db.sql(
        "INSERT INTO {ir}.console_activity (user_name, action, subject, reason, rows)
         VALUES ($1, $2, $3, $4, $5)",
    ))
    .persistent(db.named())
    .bind(activity.user_name)
    .bind(activity.action)
    .bind(activity.subject)
    .bind(activity.reason)
    .bind(rows)
    .execute(&mut *c)
    .await
    .map(|_| ())
}

/// The latest `limit` activity records, newest first.
pub async fn latest(db: &Db, limit: i64) -> Result<Vec<Activity>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT id, at, user_name, action, subject, reason, rows
           FROM {ir}.console_activity ORDER BY at DESC, id DESC LIMIT $1"
    ))
    .persistent(db.named())
    .bind(limit)
    .fetch_all(&mut *c)
    .await)
}
