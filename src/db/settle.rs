//! Settling unknown deliveries by hand (`invoice-reminder settle`): the
//! operator checked the mail server's log for the stored Message-ID and
//! says whether the mail went out. Only rows whose delivery is unknown can
//! be settled: `sending`, started, and their run's lease over for good
//! (`run_gone!`; or pruned: the row's `run_id` cleared). A finished run
//! whose process still holds results the database would not take keeps
//! its lease, so a mail the relay accepted is never settled for a resend
//! while its result may still be written. One mail is settled
//! as a whole: the rows of a statement share its Message-ID, and naming
//! one of them names them all.

use chrono::NaiveDate;
use sqlx::FromRow;

use super::Db;
use super::activity::{NewActivity, record_on};
use super::conn::on_db;
use super::owing::{OwingDay, date_value, in_window, windows};
use super::runs::run_gone;
use crate::domain::StepKey;
use crate::domain::{InvoiceId, ReminderId};

/// A row named on the command line, or one that shares a Message-ID with
/// one (its mail's other rows), as it stands.
#[derive(Debug, Clone, FromRow)]
pub struct NamedRow {
    pub id: ReminderId,
    pub invoice_id: InvoiceId,
    /// The step key (column `period`).
    #[sqlx(rename = "period")]
    pub step: StepKey,
    pub status: String,
    /// The Message-ID its mail carried, stored before the send (None: a
    /// row started by a version that did not store it).
    pub message_id: Option<String>,
    /// Named on the command line (not only one of its mail's rows).
    pub named: bool,
    /// Delivery unknown: `sending`, started, its run's lease over.
    pub unknown: bool,
    /// The invoice's due step today, if it owes one.
    pub due_step: Option<String>,
    /// None when the source no longer has the invoice.
    pub due_date: Option<NaiveDate>,
}

/// The rows `ids` (those that exist) and the `sending` rows that carry
/// Message-ID `message`, and every unknown row that shares a stored
/// Message-ID with one of them, with what settling needs to decide; by
/// Message-ID, then id.
pub async fn named_rows(
    db: &Db,
    ids: &[ReminderId],
    message: Option<&str>,
    today: &OwingDay,
) -> Result<Vec<NamedRow>, sqlx::Error> {
    let statement = db.statement(concat!(
        "WITH named AS (SELECT id, message_id FROM {ir}.reminders",
        " WHERE id = ANY($ids) OR (status = 'sending' AND message_id = $message))",
        " SELECT r.id, r.invoice_id, r.period, r.status, r.message_id, ",
        date_value!("s.due_date"),
        " AS due_date,",
        " r.id IN (SELECT id FROM named) AS named,",
        " (r.status = 'sending' AND r.started_at IS NOT NULL AND ",
        run_gone!("j"),
        ") AS unknown,",
        " (SELECT w.key FROM ",
        windows!(),
        " WHERE ",
        in_window!("s"),
        " LIMIT 1) AS due_step",
        " FROM {ir}.reminders r",
        " LEFT JOIN {src} s ON s.invoice_id::text = r.invoice_id",
        " LEFT JOIN {ir}.job_runs j ON j.id = r.run_id",
        " WHERE r.id IN (SELECT id FROM named)",
        " OR (r.status = 'sending' AND r.message_id IN",
        " (SELECT message_id FROM named WHERE message_id IS NOT NULL))",
        " ORDER BY r.message_id, r.id"
    ));
    let message: Option<String> = message.map(str::to_owned);
    let params = today.params().with("ids", &ids).with("message", &message);
    on_db!(db, |c| statement.fetch_all(&mut *c, &params).await)
}

/// How unknown rows are settled (`operator::settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The mail went out: the rows become `sent`, keeping the Message-ID
    /// stored before their send.
    Sent,
    /// It did not: the rows go back to `failed`, so the next tick sends
    /// them again (a statement that gains no other invoice keeps its
    /// Message-ID) while their step is due.
    Resend,
}

/// The rows of `ids` whose delivery is still unknown: `sending`, started,
/// and their run's lease over.
macro_rules! still_unknown {
    () => {
        concat!(
            " WHERE r.id = ANY($1)",
            " AND r.status = 'sending' AND r.started_at IS NOT NULL",
            " AND NOT EXISTS (SELECT 1 FROM {ir}.job_runs j WHERE j.id = r.run_id AND NOT ",
            run_gone!("j"),
            ") RETURNING r.id"
        )
    };
}

/// Settles `ids` as `settlement` says; only a row still unknown is
/// changed. With `activity` (a console user's change), its record is
/// written with the rows changed, in the same transaction. Returns the ids
/// changed.
pub async fn settle(
    db: &Db,
    ids: &[ReminderId],
    settlement: Settlement,
    activity: Option<&NewActivity<'_>>,
) -> Result<Vec<ReminderId>, sqlx::Error> {
    let sql = match settlement {
        Settlement::Sent => concat!(
            "UPDATE {ir}.reminders r SET status = 'sent', sent_at = now(),",
            " last_error = 'delivery was unknown; an operator confirmed it was sent'",
            still_unknown!()
        ),
        Settlement::Resend => concat!(
            "UPDATE {ir}.reminders r SET status = 'failed', started_at = NULL,",
            " last_attempt_at = NULL,",
            " last_error = 'delivery was unknown; an operator asked to resend it'",
            still_unknown!()
        ),
    };
    on_db!(db, tx, |c| async {
        let changed: Vec<ReminderId> = sqlx::query_scalar(db.sql(sql))
            .persistent(db.named())
            .bind(ids)
            .fetch_all(&mut *c)
            .await?;
        if let Some(activity) = activity {
            let rows: Vec<i64> = changed.iter().map(|id| id.0).collect();
            record_on(c, db, activity, &rows).await?;
        }
        Ok::<_, sqlx::Error>(changed)
    }
    .await)
}
