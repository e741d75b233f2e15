//! Finding invoices by what an operator knows of them: the id, the
//! number, the customer's id (customer mode) or an address (`db::search`).

use super::desk::Desk;
use crate::db;
pub use crate::db::search::Found;

impl Desk {
    /// The unpaid invoices `query` names, at most `limit`.
    pub async fn search(&self, query: &str, limit: i64) -> Result<Vec<Found>, sqlx::Error> {
        db::search::find(self.db(), query, limit).await
    }
}
