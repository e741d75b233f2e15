//! Archived messages as both faces show them (`explain --raw`, the
//! console's invoice and message pages): an invoice's latest sent message
//! and a message by its Message-ID, with the one sentence for one the
//! archive does not keep; an invoice's proofs of acceptance.

use super::desk::Desk;
use crate::db;
pub use crate::db::archive::{ArchivedMessage, SentProof};
use crate::domain::InvoiceId;

/// A message as the archive has it.
#[derive(Debug)]
pub enum Archived {
    Kept(ArchivedMessage),
    /// Not kept (`archive.store = "none"`, or past `archive.keep_days`):
    /// the sentence that says so.
    NotKept(String),
    /// Kept, but its bytes do not decompress to the hash stored with them.
    Damaged(String),
}

impl Desk {
    /// The archived message `message_id`.
    pub async fn archived(&self, message_id: &str) -> Result<Archived, sqlx::Error> {
        match db::archive::archived_message(self.db(), message_id).await {
            Ok(Some(message)) => Ok(Archived::Kept(message)),
            Ok(None) => Ok(Archived::NotKept(format!(
                "<{message_id}> is not in the archive (archive.store = \"none\", or older than archive.keep_days)"
            ))),
            Err(db::archive::ArchiveError::Database(e)) => Err(e),
            Err(e) => Ok(Archived::Damaged(e.to_string())),
        }
    }

    /// The archived message `message_id` if it is one of invoice `id`'s
    /// (None: not one of its messages).
    pub async fn archived_of(
        &self,
        id: &InvoiceId,
        message_id: &str,
    ) -> Result<Option<Archived>, sqlx::Error> {
        let proofs = self.proofs(id).await?;
        if !proofs
            .iter()
            .any(|p| p.message_id.as_deref() == Some(message_id))
        {
            return Ok(None);
        }
        self.archived(message_id).await.map(Some)
    }

    /// Invoice `id`'s proofs of acceptance, one per reminder.
    pub async fn proofs(&self, id: &InvoiceId) -> Result<Vec<SentProof>, sqlx::Error> {
        db::archive::proofs_of_invoice(self.db(), id).await
    }
}
