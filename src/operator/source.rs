//! The source relation as the operator checks it (`check-source`): the
//! columns it has against the contract, and how the tick's scan reads it
//! (the plan of one page, and the tables it reads from end to end).

use serde_json::Value;

use super::desk::Desk;
use crate::db;
use crate::db::customers::Retries;
pub use crate::db::source::{
    AMOUNT_COLUMNS, CONTRACT, CUSTOMER_COLUMN, ContractColumn, FoundColumn, OPTIONAL_COLUMNS,
};
use crate::domain::StepKey;

/// How the tick reads one page of the source.
#[derive(Debug, Clone)]
pub struct ScanPlan {
    /// The step whose window the page is of (None: customer mode, a page
    /// in customer order).
    pub step: Option<StepKey>,
    /// PostgreSQL's `EXPLAIN (FORMAT JSON)`.
    pub plan: Value,
}

impl Desk {
    /// `source.relation`, quoted as statements name it.
    pub fn source_relation(&self) -> String {
        self.db().names().source_sql().to_owned()
    }

    /// Whether statements read the source's `customer_id` (customer mode).
    pub fn reads_customer(&self) -> bool {
        self.db().names().reads_customer()
    }

    /// The columns of `source.relation` (None: it does not exist).
    pub async fn source_columns(&self) -> Result<Option<Vec<FoundColumn>>, sqlx::Error> {
        db::source::columns(self.db()).await
    }

    /// The plan of one page of today's scan: the step with the widest
    /// window, or in customer mode a page in customer order (None: no
    /// step).
    pub async fn scan_plan(&self) -> Result<Option<ScanPlan>, sqlx::Error> {
        let settings = self.settings();
        let owing = self.owing_day().await?;
        let windows = settings.reminders.stages.windows(owing.date);
        let Some(window) = windows.last() else {
            return Ok(None);
        };
        let batch_size = settings.reminders.batch_size;
        Ok(Some(if self.reads_customer() {
            let retries = Retries::from_settings(&settings.reminders, 0);
            ScanPlan {
                step: None,
                plan: db::customers::explain_customer_page(self.db(), &owing, &retries, batch_size)
                    .await?,
            }
        } else {
            ScanPlan {
                step: Some(window.step.key.clone()),
                plan: db::invoices::explain_owed_page(self.db(), window, &owing, batch_size)
                    .await?,
            }
        }))
    }

    /// The planner's estimate of `schema.table`'s rows.
    pub async fn estimated_rows(&self, schema: &str, table: &str) -> Result<f64, sqlx::Error> {
        db::invoices::estimated_rows(self.db(), schema, table).await
    }
}
