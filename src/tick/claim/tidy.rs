//! Before a tick claims anything: retire `failed` rows that will never be
//! sent, hand back the rows of ended runs that never started, end the
//! paid holds the books caught up with, delete archived
//! messages past `archive.keep_days`, return unknown deliveries for
//! resending (when configured), and report the source rows no page can
//! meet (a NULL key or due date; in customer mode, a NULL customer).

use super::claiming::Claiming;
use super::grouping::Grouping;
use crate::db;
use crate::domain::Counts;
use crate::tick::{TickError, db_err};

/// How many rows with a NULL key or due date a tick reports at most.
const UNUSABLE_REPORTED: u32 = 1_000;

/// Retires, returns and deletes what earlier ticks left (see the module
/// doc).
pub(super) async fn tidy_up(c: &Claiming) -> Result<(), TickError> {
    let s = &c.p().ctx().settings;
    let database = &c.p().ctx().db;
    let retired = db::returned::retire_failed(database, c.today(), s.reminders.max_attempts)
        .await
        .map_err(db_err(
            "discarding failed reminders that will not be retried",
        ))?;
    if retired > 0 {
        tracing::info!(
            retired,
            "failed reminders of steps no longer due, or out of attempts, were discarded"
        );
        c.p().add(&Counts {
            discarded: u32::try_from(retired).unwrap_or(u32::MAX),
            ..Counts::default()
        });
    }
    let handed_back = db::returned::hand_back_abandoned(database)
        .await
        .map_err(db_err("handing back rows that ended runs never started"))?;
    if handed_back > 0 {
        tracing::info!(
            handed_back,
            "rows claimed by runs that are over, never started, were handed back"
        );
    }
    let booked = db::payments::end_booked(database).await.map_err(db_err(
        "ending the paid holds of invoices the books say are paid",
    ))?;
    if booked > 0 {
        tracing::info!(
            booked,
            "paid holds ended: the books say those invoices are paid (a reopened one is reminded again)"
        );
    }
    let keep_days = s.archive.keep_days;
    let expired = db::archive::delete_expired(database, keep_days)
        .await
        .map_err(db_err("deleting archived messages past archive.keep_days"))?;
    if expired > 0 {
        tracing::info!(
            expired,
            keep_days,
            "archived messages past archive.keep_days were deleted"
        );
    }
    if let Some(after) = s.reminders.resend_unknown_after {
        let n = db::returned::resend_unknown(database, after)
            .await
            .map_err(db_err("handing back unknown deliveries for resending"))?;
        if n > 0 {
            tracing::warn!(
                n,
                "unknown deliveries handed back for resending (reminders.resend_unknown_after)"
            );
        }
    }
    Ok(())
}

/// Rows without a due date or a key (or, as `grouping` says, a row its
/// walk never meets) have no place in a page's order: they are looked up
/// once per tick (bounded) and reported.
pub(super) async fn report_unusable_rows(
    c: &Claiming,
    grouping: &dyn Grouping,
) -> Result<(), TickError> {
    let Some(due_by) = c.today().due_by() else {
        return Ok(());
    };
    let rows = db::owed::unusable_rows(&c.p().ctx().db, due_by, UNUSABLE_REPORTED)
        .await
        .map_err(db_err("looking for invoices without a key or a due date"))?;
    for row in rows {
        let problem = grouping.unmet(&row);
        if let Some(problem) = problem.or_else(|| row.into_parts().err()) {
            c.p().problem(problem);
        }
    }
    Ok(())
}
