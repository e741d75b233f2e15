//! The console overview's own reads: reminders by status without the
//! `sent` ones (the numbers that stay small however long the history), and
//! the last days' reminders by outcome per day. Each reads an index of
//! `migrations/20261206000002_console_indexes.sql`, so it costs what the
//! days or the open rows hold, not the whole history (BENCHMARKS.md, "The
//! console at 1M reminders").

use std::collections::BTreeMap;

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;

/// Reminders by status, every status but `sent` (`status` and `audit`
/// count the same rows; `sent` is most of the table, and the overview
/// shows today's sent instead).
pub async fn open_counts(db: &Db) -> Result<BTreeMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i64)> = on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT status, count(*) FROM {ir}.reminders WHERE status <> 'sent' GROUP BY status"
    ))
    .persistent(db.named())
    .fetch_all(&mut *c)
    .await)?;
    Ok(rows.into_iter().collect())
}

/// Reminders claimed on one day, with the status they have now.
#[derive(Debug, Clone, FromRow, serde::Serialize)]
pub struct DayOutcome {
    pub day: NaiveDate,
    pub status: String,
    pub reminders: i64,
}

/// Reminders claimed (their latest try) on each of the `days` days up to
/// and including `today`, in `timezone`, by their status now; days
/// without reminders are left out.
pub async fn by_day(
    db: &Db,
    today: NaiveDate,
    timezone: &str,
    days: i32,
) -> Result<Vec<DayOutcome>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT (claimed_at AT TIME ZONE $2)::date AS day, status, count(*) AS reminders
           FROM {ir}.reminders
          WHERE claimed_at >= (($1::date - $3 + 1)::timestamp AT TIME ZONE $2)
            AND claimed_at < (($1::date + 1)::timestamp AT TIME ZONE $2)
          GROUP BY 1, 2 ORDER BY 1, 2"
    ))
    .persistent(db.named())
    .bind(today)
    .bind(timezone)
    .bind(days)
    .fetch_all(&mut *c)
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
