//! The operator console's tables: its sessions and its activity log, and
//! the console's writes, each in one transaction with the activity record
//! that says who made it (the change itself is the statement `resolve` or
//! `suppress` runs, called on the same connection).

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::owing::hold_active;
use super::params::Params;
use super::pauses::Paused;
use super::suppressions::{Added, NewSuppression};
use crate::domain::InvoiceId;

/// A signed-in browser, found by the SHA-256 of its cookie's token.
#[derive(Debug, Clone, FromRow)]
pub struct SessionRow {
    pub user_name: String,
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

/// Stores a new session that ends after `ttl_secs`.
pub async fn create_session(
    db: &Db,
    token_sha256: &[u8],
    user_name: &str,
    csrf: &str,
    ttl_secs: f64,
) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "INSERT INTO {ir}.console_sessions (token_sha256, user_name, csrf, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(secs => $4))"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .bind(user_name)
    .bind(csrf)
    .bind(ttl_secs)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

/// The session with this token, unless it has ended.
pub async fn find_session(db: &Db, token_sha256: &[u8]) -> Result<Option<SessionRow>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT user_name, csrf, expires_at FROM {ir}.console_sessions
          WHERE token_sha256 = $1 AND expires_at > now()"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .fetch_optional(&mut *c)
    .await)
}

/// Ends the session with this token, and every session that has expired.
pub async fn end_session(db: &Db, token_sha256: &[u8]) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "DELETE FROM {ir}.console_sessions WHERE token_sha256 = $1 OR expires_at <= now()"
    ))
    .persistent(db.named())
    .bind(token_sha256)
    .execute(&mut *c)
    .await
    .map(|_| ()))
}

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
pub async fn activity(db: &Db, limit: i64) -> Result<Vec<Activity>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT id, at, user_name, action, subject, reason, rows
           FROM {ir}.console_activity ORDER BY at DESC, id DESC LIMIT $1"
    ))
    .persistent(db.named())
    .bind(limit)
    .fetch_all(&mut *c)
    .await)
}

/// Adds to the suppression list as `suppress add` does, with `activity`,
/// in one transaction.
pub async fn suppress(
    db: &Db,
    entry: NewSuppression<'_>,
    activity: &NewActivity<'_>,
) -> Result<Added, sqlx::Error> {
    on_db!(db, tx, |c| async {
        let added = super::suppressions::upsert(c, db, entry).await?;
        record_on(c, db, activity, &[]).await?;
        Ok::<_, sqlx::Error>(added)
    }
    .await)
}

/// Takes an address off the suppression list as `suppress remove` does,
/// with `activity`, in one transaction; false (and no record) if it was
/// not listed.
pub async fn unsuppress(
    db: &Db,
    address: &str,
    activity: &NewActivity<'_>,
) -> Result<bool, sqlx::Error> {
    on_db!(db, tx, |c| async {
        let removed = super::suppressions::remove_on(c, db, address).await?;
        if removed {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(removed)
    }
    .await)
}

/// Reminders recorded `sent` on `today` in `timezone`, and addresses on
/// the suppression list: the overview's numbers that `audit` does not
/// count.
pub async fn overview_counts(
    db: &Db,
    today: NaiveDate,
    timezone: &str,
) -> Result<(i64, i64), sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT (SELECT count(*) FROM {ir}.reminders
                  WHERE status = 'sent' AND sent_at >= ($1::date::timestamp AT TIME ZONE $2)
                    AND sent_at < (($1::date + 1)::timestamp AT TIME ZONE $2)),
                (SELECT count(*) FROM {ir}.suppressions)"
    ))
    .persistent(db.named())
    .bind(today)
    .bind(timezone)
    .fetch_one(&mut *c)
    .await)
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
        super::pauses::pause_on(c, db, what, reason, activity.user_name).await?;
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
        let removed = super::pauses::unpause_on(c, db, what).await?;
        if removed {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(removed)
    }
    .await)
}

/// Lifts the payment hold of invoice `id` for a console user, with `activity`, in
/// one transaction; false (and no record) when nothing held it.
pub async fn lift_hold(
    db: &Db,
    id: &InvoiceId,
    activity: &NewActivity<'_>,
) -> Result<bool, sqlx::Error> {
    let query = db.statement(concat!(
        "UPDATE {ir}.payment_holds h SET state = 'lifted', lifted_by = $user, changed_at = now()",
        " WHERE h.invoice_id = $id AND ",
        hold_active!("h")
    ));
    let user = activity.user_name.to_owned();
    let params = Params::default().with("id", &id).with("user", &user);
    on_db!(db, tx, |c| async {
        let lifted = query.execute(&mut *c, &params).await?.rows_affected() > 0;
        if lifted {
            record_on(c, db, activity, &[]).await?;
        }
        Ok::<_, sqlx::Error>(lifted)
    }
    .await)
}
