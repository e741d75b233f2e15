//! `audit`'s report, the operator's check of the reminders table: what
//! the command prints (and `--json` encodes) and the console's numbers
//! share these reads.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use chrono::NaiveDate;

use super::db_failed;
use super::desk::Desk;
use super::unknown::{UnknownMail, UnknownRow};
use crate::db;
pub use crate::db::audit::{DuplicateGroup, FailedRow};
use crate::db::owed::{OwedReminder, OwedRow};
use crate::db::payments::HoldCounts;
use crate::db::suppressions::SkippedRow;

/// How many missing invoices are listed (all are counted).
const MISSING_LISTED: usize = 100;
/// How many skipped reminders are listed (all are counted).
const SKIPPED_LISTED: i64 = 100;

#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    /// The database's date in the customers' zone.
    pub today: NaiveDate,
    /// (invoice_id, period) with more than one reminder; exit 1 if any.
    pub duplicates: Vec<DuplicateGroup>,
    /// `sending` rows whose delivery is unknown (at-most-once: not resent).
    pub unknown: Vec<UnknownRow>,
    /// The same rows by mail: one entry per stored Message-ID (a
    /// statement's rows share one), settled as a whole by `settle`.
    pub unknown_mails: Vec<UnknownMail>,
    /// `failed` rows (retried while their step is due) and rows
    /// `discarded` in the last 7 days.
    pub failed: Vec<FailedRow>,
    /// Reminders recorded `skipped` in the last 7 days (every recipient
    /// suppressed: `reason` "suppressed"), newest first. Not missing, not
    /// failed: the step keeps its claim and is not tried again.
    pub skipped_count: i64,
    pub skipped: Vec<SkippedRow>,
    /// Unpaid, unpaused invoices whose due step has no reminder yet.
    pub missing_count: i64,
    pub missing: Vec<OwedReminder>,
    /// Every reminder by status.
    pub counts: BTreeMap<String, i64>,
    /// Reminders sent, by step.
    pub sent_by_step: BTreeMap<String, i64>,
    /// Source rows that owe a reminder but cannot make one (a repeated
    /// key, a NULL, a bad currency or address), from a bounded check.
    pub source_problems_count: usize,
    pub source_problems: Vec<crate::domain::SourceProblem>,
    /// Owed rows the check read (at most `operator::survey::ROWS_CHECKED`).
    pub source_rows_checked: usize,
    /// Invoices a payment signal holds now, by state (not missing: the
    /// provider said paid, pending or disputed).
    pub payment_holds: HoldCounts,
}

impl Desk {
    /// `audit`'s report: duplicates, unknown deliveries (started rows
    /// `sending` whose run's lease is over, or claimed more than
    /// `unknown_after` ago), failures, skipped and missing reminders,
    /// counts, source problems and payment holds.
    pub async fn audit(&self, unknown_after: Duration) -> anyhow::Result<AuditReport> {
        let today = self
            .today()
            .await
            .context("failed to read the database clock")?;
        let pool = self.db();
        let read = || db_failed("failed to read the reminders table");
        let survey = self
            .survey()
            .await
            .map_err(db_failed("failed to read the invoices that owe a reminder"))?;
        let missing: Vec<OwedReminder> = survey
            .owed
            .rows
            .iter()
            .filter(|r| r.kind == "new")
            .filter_map(OwedRow::reminder)
            .take(MISSING_LISTED)
            .collect();
        let missing_count = survey.owed.total_new;
        let problems = survey.problems;
        let (counts, sent_by_step) = db::audit::counts(pool).await.map_err(read())?;
        let unknown = self.unknown(unknown_after).await.map_err(read())?;
        let (skipped_count, skipped) = self.skipped(SKIPPED_LISTED).await.map_err(read())?;
        Ok(AuditReport {
            duplicates: db::audit::duplicates(pool).await.map_err(read())?,
            unknown_mails: unknown.mails,
            unknown: unknown.rows,
            failed: db::audit::failed(pool).await.map_err(read())?,
            skipped_count,
            skipped,
            missing_count,
            missing,
            counts,
            sent_by_step,
            source_problems_count: problems.count,
            source_rows_checked: problems.rows_checked,
            source_problems: problems.listed,
            payment_holds: self
                .holds()
                .await
                .map_err(db_failed("failed to read the payment holds"))?,
            today,
        })
    }
}
