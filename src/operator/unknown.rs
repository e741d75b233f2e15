//! Unknown deliveries, by mail: the rows of a statement share one
//! Message-ID and are one mail to settle. `audit` lists them, the
//! console's Unknown page shows them.

use std::time::Duration;

use super::desk::Desk;
use crate::db;
pub use crate::db::audit::UnknownRow;
use crate::domain::{InvoiceId, StepKey};

/// A started row `sending` for longer than this (its run not known to be
/// over) counts as an unknown delivery: `audit`'s default
/// (`--unknown-after`) and the console's.
pub const UNKNOWN_AFTER: Duration = Duration::from_secs(10 * 60);

/// One mail whose delivery is unknown: what to look up in the mail
/// server's log, and the rows `settle` settles with it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnknownMail {
    /// The Message-ID stored before its send (None: a row started by a
    /// version that did not store it; it is a mail of its own).
    pub message_id: Option<String>,
    pub reminder_ids: Vec<i64>,
    pub invoice_ids: Vec<InvoiceId>,
    /// The step keys (`periods` in JSON, after the column).
    #[serde(rename = "periods")]
    pub steps: Vec<StepKey>,
    pub run_id: Option<i64>,
    pub replica_id: Option<String>,
    pub claimed_at: chrono::DateTime<chrono::Utc>,
    pub last_error: Option<String>,
}

/// `rows` by mail, in the order of their first row.
pub fn unknown_mails(rows: &[UnknownRow]) -> Vec<UnknownMail> {
    let mut mails: Vec<UnknownMail> = Vec::new();
    for r in rows {
        let same = r.message_id.as_ref().and_then(|m| {
            mails
                .iter_mut()
                .find(|mail| mail.message_id.as_ref() == Some(m))
        });
        match same {
            Some(mail) => {
                mail.reminder_ids.push(r.reminder_id);
                mail.invoice_ids.push(r.invoice_id.clone());
                mail.steps.push(r.step.clone());
            }
            None => mails.push(UnknownMail {
                message_id: r.message_id.clone(),
                reminder_ids: vec![r.reminder_id],
                invoice_ids: vec![r.invoice_id.clone()],
                steps: vec![r.step.clone()],
                run_id: r.run_id,
                replica_id: r.replica_id.clone(),
                claimed_at: r.claimed_at,
                last_error: r.last_error.clone(),
            }),
        }
    }
    mails
}

/// Unknown deliveries: the rows, and the same rows by mail.
#[derive(Debug, Clone, Default)]
pub struct Unknown {
    pub rows: Vec<UnknownRow>,
    pub mails: Vec<UnknownMail>,
}

impl Desk {
    /// The started `sending` rows whose run's lease is over, or claimed
    /// longer than `after` ago, and their mails.
    pub async fn unknown(&self, after: Duration) -> Result<Unknown, sqlx::Error> {
        let rows = db::audit::unknown(self.db(), after.as_secs_f64()).await?;
        Ok(Unknown {
            mails: unknown_mails(&rows),
            rows,
        })
    }
}
