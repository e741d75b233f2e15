//! The console's activity log as the operator reads it: who changed what,
//! and why, newest first (each change writes its record in its own
//! transaction, `db::activity`).

use super::desk::Desk;
use crate::db;
pub use crate::db::activity::Activity;

impl Desk {
    /// The latest `limit` records, newest first.
    pub async fn activity(&self, limit: i64) -> Result<Vec<Activity>, sqlx::Error> {
        db::activity::latest(self.db(), limit).await
    }
}
