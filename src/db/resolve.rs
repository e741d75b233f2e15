//! Settling unknown deliveries by hand (`invoice-reminder resolve`): the
//! operator checked the mail server's log and says whether the mail went
//! out. Only rows whose delivery is unknown can be settled: `sending`,
//! started, and their run over (finished, or past its lease; or pruned:
//! the row's `run_id` cleared).

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::invoices::window_arrays;
use super::runs::run_ended;
use crate::domain::{InvoiceId, ReminderId};
use crate::stages::Window;

/// A row named on the command line, as it stands.
#[derive(Debug, Clone, FromRow)]
pub struct NamedRow {
    pub id: ReminderId,
    pub invoice_id: InvoiceId,
    pub period: String,
    pub status: String,
    /// Delivery unknown: `sending`, started, its run over.
    pub unknown: bool,
    /// The invoice's due step today, if it owes one.
    pub due_step: Option<String>,
    /// None when the source no longer has the invoice.
    pub due_date: Option<NaiveDate>,
}

/// The rows `ids` (those that exist), with what `resolve` needs to decide.
pub async fn named_rows(
    db: &Db,
    ids: &[ReminderId],
    windows: &[Window],
) -> Result<Vec<NamedRow>, sqlx::Error> {
    let (keys, froms, tos) = window_arrays(windows);
    on_db!(db, |c| {
        sqlx::query_as(
        db.sql(concat!("SELECT r.id, r.invoice_id, r.period, r.status, s.due_date,
                (r.status = 'sending' AND r.started_at IS NOT NULL AND ", run_ended!("j"), ") AS unknown,
                (SELECT w.key FROM unnest($2::text[], $3::date[], $4::date[]) AS w(key, due_from, due_to)
                  WHERE s.due_date >= COALESCE(w.due_from, '-infinity'::date) AND s.due_date <= w.due_to
                  LIMIT 1) AS due_step
           FROM {ir}.reminders r
           LEFT JOIN {src} s ON s.invoice_id::text = r.invoice_id
           LEFT JOIN {ir}.job_runs j ON j.id = r.run_id
          WHERE r.id = ANY($1)
          ORDER BY r.id")),
    )
    .persistent(db.named())
    .bind(ids)
    .bind(&keys)
    .bind(&froms)
    .bind(&tos)
    .fetch_all(&mut *c)
    .await
    })
}

/// The mail went out: the row becomes `sent` with its Message-ID. Only a
/// row still unknown is changed; returns the ids changed.
pub async fn mark_sent(
    db: &Db,
    rows: &[(ReminderId, String)],
) -> Result<Vec<ReminderId>, sqlx::Error> {
    let ids: Vec<ReminderId> = rows.iter().map(|r| r.0).collect();
    let message_ids: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
    on_db!(db, |c| sqlx::query_scalar(db.sql(concat!(
        "UPDATE {ir}.reminders r
            SET status = 'sent', sent_at = now(), message_id = u.message_id,
                last_error = 'delivery was unknown; an operator confirmed it was sent'
           FROM unnest($1::bigint[], $2::text[]) AS u(id, message_id)
          WHERE r.id = u.id
            AND r.status = 'sending' AND r.started_at IS NOT NULL
            AND NOT EXISTS (
                SELECT 1 FROM {ir}.job_runs j WHERE j.id = r.run_id AND NOT ",
        run_ended!("j"),
        ")
         RETURNING r.id"
    )),)
    .persistent(db.named())
    .bind(&ids)
    .bind(&message_ids)
    .fetch_all(&mut *c)
    .await)
}

/// The mail did not go out: the row goes back to `failed`, so the next tick
/// sends it (with the same Message-ID) while its step is due. Only a row
/// still unknown is changed; returns the ids changed.
pub async fn mark_for_resend(db: &Db, ids: &[ReminderId]) -> Result<Vec<ReminderId>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_scalar(db.sql(concat!(
        "UPDATE {ir}.reminders r
            SET status = 'failed', started_at = NULL, last_attempt_at = NULL,
                last_error = 'delivery was unknown; an operator asked to resend it'
          WHERE r.id = ANY($1)
            AND r.status = 'sending' AND r.started_at IS NOT NULL
            AND NOT EXISTS (
                SELECT 1 FROM {ir}.job_runs j WHERE j.id = r.run_id AND NOT ",
        run_ended!("j"),
        ")
         RETURNING r.id"
    )),)
    .persistent(db.named())
    .bind(ids)
    .fetch_all(&mut *c)
    .await)
}
