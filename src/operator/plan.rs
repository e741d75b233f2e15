//! What the next tick would try (`run-once --dry-run`): the invoices that
//! owe a reminder and the step each would get, by the tick's conditions,
//! claiming nothing.

use chrono::NaiveDate;

use super::db_failed;
use super::desk::Desk;
use crate::db;
use crate::db::owed::OwedReminder;

/// What `run-once --dry-run` would do, without claiming anything.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DryRun {
    /// The database's date in the customers' zone.
    pub today: NaiveDate,
    /// The send window's next opening (RFC 3339, local) while it is
    /// closed: the next tick claims nothing before then.
    pub window_opens: Option<String>,
    /// Each invoice that owes a reminder and the step it would get.
    pub would_send: Vec<OwedReminder>,
    /// How many owe one in all (`would_send` stops at the limit), source
    /// problems among the listed rows left out.
    pub total: i64,
    /// How many would get each step, in stage order (listed ones only).
    pub per_step: Vec<(crate::domain::StepKey, usize)>,
    /// Listed rows that would be skipped as source problems.
    pub source_problems: usize,
}

impl Desk {
    /// Lists the reminders the next tick would try (new and retries), at
    /// most `limit`; rows with a source problem are left out (a tick skips
    /// them) and counted.
    pub async fn plan(&self, limit: u32) -> anyhow::Result<DryRun> {
        let s = self.settings();
        let today = self
            .today()
            .await
            .map_err(db_failed("failed to read the database clock"))?;
        let stages = &s.reminders.stages;
        let listing = db::owed::owed_listing(
            self.db(),
            &self
                .owing_day()
                .await
                .map_err(db_failed("failed to read the database clock"))?,
            s.reminders.max_attempts,
            limit,
        )
        .await
        .map_err(db_failed("failed to read the invoices that owe a reminder"))?;
        let (sendable, problems): (Vec<_>, Vec<_>) = listing
            .rows
            .iter()
            .partition(|r| r.copies == 1 && r.row.clone().into_parts().is_ok());
        let would_send: Vec<OwedReminder> =
            sendable.into_iter().filter_map(|r| r.reminder()).collect();
        let per_step = stages
            .steps()
            .iter()
            .map(|step| {
                let n = would_send.iter().filter(|r| r.step == step.key).count();
                (step.key.clone(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let now = self
            .now()
            .await
            .map_err(db_failed("failed to read the database clock"))?;
        let window_opens = match s.send_window().state_at(now) {
            crate::domain::WindowState::Closed { opens, .. } => Some(opens.to_rfc3339()),
            crate::domain::WindowState::Open { .. } => None,
        };
        Ok(DryRun {
            today,
            window_opens,
            would_send,
            total: listing
                .total
                .saturating_sub(i64::try_from(problems.len()).unwrap_or(i64::MAX)),
            per_step,
            source_problems: problems.len(),
        })
    }
}
