//! The overview's numbers that `audit` does not give: reminders by status
//! without the `sent` ones, today's sent mail, the suppressed addresses,
//! the relay's rate as the pacer left it, and the last days' reminders by
//! outcome (each read through an index that keeps it small however long
//! the history, `db::overview`).

use std::collections::BTreeMap;

use super::desk::Desk;
use crate::db;
pub use crate::db::overview::DayOutcome;
pub use crate::db::relay_pace::RateStatus;
pub use crate::db::runs::RunRow;

impl Desk {
    /// Reminders by status, every status but `sent`.
    pub async fn open_counts(&self) -> Result<BTreeMap<String, i64>, sqlx::Error> {
        db::overview::open_counts(self.db()).await
    }

    /// Reminders sent today, and addresses on the suppression list.
    pub async fn sent_today_and_suppressed(&self) -> Result<(i64, i64), sqlx::Error> {
        let today = self.today().await?;
        let tz = self.settings().customer_timezone().name();
        db::overview::overview_counts(self.db(), today, tz).await
    }

    /// The last `days` days' reminders by outcome, up to today.
    pub async fn days(&self, days: i32) -> Result<Vec<DayOutcome>, sqlx::Error> {
        let today = self.today().await?;
        let tz = self.settings().customer_timezone().name();
        db::overview::by_day(self.db(), today, tz, days).await
    }

    /// The relay's rate as the pacer stored it (None: nothing stored).
    pub async fn relay_rate(&self) -> Result<Option<RateStatus>, sqlx::Error> {
        db::relay_pace::status(self.db(), &self.settings().smtp.relay()).await
    }

    /// The last `n` runs, newest first.
    pub async fn recent_runs(&self, n: u32) -> Result<Vec<RunRow>, sqlx::Error> {
        db::runs::recent_runs(self.db(), n).await
    }

    /// Every reminder by status, and the sent ones by step.
    pub async fn counts(
        &self,
    ) -> Result<(BTreeMap<String, i64>, BTreeMap<String, i64>), sqlx::Error> {
        db::audit::counts(self.db()).await
    }
}
