//! Rows given back or retired: a run's rows never started returned at
//! its end, the never-started rows of runs that are over for good,
//! `failed` rows that will never be sent, and (when configured) unknown
//! deliveries returned for resending.
//!
//! Every write here is guarded by the row's status (and, for a run's own
//! rows, by `run_id`), so a write replayed after a lost reply, or racing
//! another run's mark, changes nothing it should not: a row is started
//! (and then sent) or handed back, never both.

use std::time::Duration;

use super::Db;
use super::conn::on_db;
use super::owing::{OwingDay, in_window, windows};
use super::runs::{run_ended, run_gone};
use crate::domain::ReminderId;

/// Returns the rows run `run_id` still holds in `sending` that never
/// started, and `unsent` (started, then never handed to the server): a
/// first claim is deleted (the invoice is simply owed again), a retry goes
/// back to `failed`, forgetting the Message-ID of `fresh` rows (made for
/// this attempt, carried by no mail) and keeping the others' (an unknown
/// mail's, which a resend carries again).
///
/// Sweeping by run rather than by a list of claimed ids also returns rows
/// whose claim committed but whose reply never reached us (the database
/// connection broke mid-statement): we never saw them, so we never sent them.
pub async fn hand_back(
    db: &Db,
    run_id: i64,
    unsent: &[ReminderId],
    fresh: &[ReminderId],
) -> Result<u64, sqlx::Error> {
    let (deleted, restored): (i64, i64) = on_db!(db, |c| sqlx::query_as(db.sql(
        "WITH deleted AS (
             DELETE FROM {ir}.reminders
              WHERE run_id = $1 AND status = 'sending' AND attempts = 0
                AND (started_at IS NULL OR id = ANY($2))
             RETURNING id
         ), restored AS (
             UPDATE {ir}.reminders SET status = 'failed', started_at = NULL,
                    message_id = CASE WHEN id = ANY($3) THEN NULL ELSE message_id END
              WHERE run_id = $1 AND status = 'sending' AND attempts > 0
                AND (started_at IS NULL OR id = ANY($2))
             RETURNING id
         )
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM restored)"
    ),)
    .persistent(db.named())
    .bind(run_id)
    .bind(unsent)
    .bind(fresh)
    .fetch_one(&mut *c)
    .await)?;
    Ok(u64::try_from(deleted + restored).unwrap_or(0))
}

/// Returns the never-started rows of runs that are over for good (finished,
/// or past their lease by the database clock): what a killed replica
/// claimed but never handed to SMTP. Started rows stay (unknown).
pub async fn hand_back_abandoned(db: &Db) -> Result<u64, sqlx::Error> {
    let (deleted, restored): (i64, i64) = on_db!(db, |c| {
        sqlx::query_as(
        db.sql(concat!("WITH over AS (
             SELECT r.id, r.attempts
               FROM {ir}.reminders r
               LEFT JOIN {ir}.job_runs j ON j.id = r.run_id
              WHERE r.status = 'sending' AND r.started_at IS NULL AND ", run_ended!("j"), "
                FOR UPDATE OF r SKIP LOCKED
         ), deleted AS (
             DELETE FROM {ir}.reminders r USING over
              WHERE r.id = over.id AND over.attempts = 0 AND r.status = 'sending' AND r.started_at IS NULL
             RETURNING r.id
         ), restored AS (
             UPDATE {ir}.reminders r SET status = 'failed'
               FROM over
              WHERE r.id = over.id AND over.attempts > 0 AND r.status = 'sending' AND r.started_at IS NULL
             RETURNING r.id
         )
         SELECT (SELECT count(*) FROM deleted), (SELECT count(*) FROM restored)")),
    )
    .persistent(db.named())
    .fetch_one(&mut *c)
    .await
    })?;
    Ok(u64::try_from(deleted + restored).unwrap_or(0))
}

/// `failed` rows whose step is no longer their invoice's due step, and
/// `failed` rows whose attempts already reach `max_attempts` (it was
/// lowered), become `discarded` with the reason. A superseded step is never
/// sent late. Returns how many.
pub async fn retire_failed(
    db: &Db,
    today: &OwingDay,
    max_attempts: u32,
) -> Result<u64, sqlx::Error> {
    // One statement: a row is retired for the first reason that applies.
    // A step is superseded only by the invoice's one source row: a key on
    // several rows (a source problem) says nothing certain about its step.
    let statement = db.statement(concat!(
        "UPDATE {ir}.reminders r SET status = 'discarded', last_error = CASE",
        " WHEN x.superseded_by IS NOT NULL THEN 'superseded by ' || x.superseded_by",
        " ELSE 'gave up: ' || r.attempts || ' attempts reach reminders.max_attempts = ' || $max_attempts",
        " || COALESCE(' (last error: ' || r.last_error || ')', '') END",
        " FROM (SELECT f.id, (SELECT w.key FROM {src} s, ",
        windows!(),
        " WHERE s.invoice_id::text = f.invoice_id AND ",
        in_window!("s"),
        " AND f.period <> w.key",
        " AND (SELECT count(*) FROM {src} k WHERE k.invoice_id::text = f.invoice_id) = 1",
        " LIMIT 1) AS superseded_by FROM {ir}.reminders f WHERE f.status = 'failed') x",
        " WHERE r.id = x.id AND r.status = 'failed'",
        " AND (x.superseded_by IS NOT NULL OR r.attempts >= $max_attempts)"
    ));
    let max_attempts = i64::from(max_attempts);
    let params = today.params().with("max_attempts", &max_attempts);
    on_db!(db, |c| statement
        .execute(&mut *c, &params)
        .await
        .map(|done| done.rows_affected()))
}

/// `reminders.resend_unknown_after`: started rows left `sending` by runs
/// whose lease is over for good (by the database clock: their process can
/// no longer write a result; a run whose process still holds results keeps
/// its lease), claimed longer than `after` ago, go back to `failed`, so the
/// next tick sends them again (with the same Message-ID) while their step
/// is due. Returns how many.
pub async fn resend_unknown(db: &Db, after: Duration) -> Result<u64, sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query(
        db.sql(concat!("UPDATE {ir}.reminders r
            SET status = 'failed', started_at = NULL,
                last_error = 'delivery unknown; returned for resending by reminders.resend_unknown_after'
          WHERE r.status = 'sending' AND r.started_at IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM {ir}.job_runs j WHERE j.id = r.run_id AND NOT ", run_gone!("j"), ")
            AND r.claimed_at < now() - make_interval(secs => $1)")),
    )
    .persistent(db.named())
    .bind(after.as_secs_f64())
    .execute(&mut *c)
    .await
    .map(|done| done.rows_affected())
    })
}
