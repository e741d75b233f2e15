//! The proof of acceptance of sent reminders and the message archive
//! (`archive.store = "database"`): reading them back, and deleting what
//! is older than `archive.keep_days`.
//!
//! Both are written by `deliveries::record_deliveries`, in the statement
//! that records the results (no statement of their own). An archived
//! message is stored zlib-compressed ([`compress`]); reading it back checks
//! its SHA-256 against the one stored when it was sent, so what
//! [`archived_message`] returns is exactly what the SMTP server accepted,
//! or an error saying it is not.

use std::io::{Read as _, Write as _};

use chrono::{DateTime, Utc};
use sha2::Digest as _;

use super::Db;
use super::conn::on_db;
use crate::domain::StepKey;
use crate::domain::{InvoiceId, ReminderId};

/// How many archived messages one cleanup deletes at most: a first run
/// after years of archive never holds a lock on millions of rows at once.
pub const CLEANUP_BATCH: i64 = 10_000;

/// What the SMTP server said when it took a reminder, as stored on its row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SentProof {
    pub reminder_id: ReminderId,
    pub status: String,
    pub message_id: Option<String>,
    pub sent_at: Option<DateTime<Utc>>,
    /// The server's final reply (`250 2.0.0 Ok: queued as 4F3X2`); None for
    /// rows not sent, or sent before proofs were kept.
    pub smtp_reply: Option<String>,
    /// SHA-256 of the exact bytes sent.
    pub message_sha256: Option<Vec<u8>>,
}

impl SentProof {
    /// The hash as lowercase hex, as `sha256sum` prints it.
    pub fn sha256_hex(&self) -> Option<String> {
        self.message_sha256.as_deref().map(hex)
    }
}

/// An archived message, decompressed and checked against its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedMessage {
    pub message_id: String,
    pub archived_at: DateTime<Utc>,
    pub sha256: Vec<u8>,
    /// The message exactly as sent (headers and body).
    pub bytes: Vec<u8>,
}

/// `archived_at`, `sha256`, `size`, `compressed`.
type ArchiveRow = (DateTime<Utc>, Vec<u8>, i32, Vec<u8>);

/// Why an archived message cannot be given back.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The stored bytes do not decompress, or not to the hash stored with
    /// them.
    #[error("the archived message {message_id} is damaged: {reason}")]
    Damaged { message_id: String, reason: String },
}

/// The proof of the reminder of `invoice_id` for step `period`, if that
/// reminder exists.
pub async fn proof_of(
    db: &Db,
    invoice_id: &InvoiceId,
    step: &StepKey,
) -> Result<Option<SentProof>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT id AS reminder_id, status, message_id, sent_at, smtp_reply, message_sha256
           FROM {ir}.reminders WHERE invoice_id = $1 AND period = $2"
    ))
    .persistent(db.named())
    .bind(invoice_id)
    .bind(step)
    .fetch_optional(&mut *c)
    .await)
}

/// The proofs of every reminder of `invoice_id`, oldest claim first.
pub async fn proofs_of_invoice(
    db: &Db,
    invoice_id: &InvoiceId,
) -> Result<Vec<SentProof>, sqlx::Error> {
    on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT id AS reminder_id, status, message_id, sent_at, smtp_reply, message_sha256
           FROM {ir}.reminders WHERE invoice_id = $1 ORDER BY created_at, id"
    ))
    .persistent(db.named())
    .bind(invoice_id)
    .fetch_all(&mut *c)
    .await)
}

/// The archived message with Message-ID `message_id` (without angle
/// brackets), if the archive has it.
pub async fn archived_message(
    db: &Db,
    message_id: &str,
) -> Result<Option<ArchivedMessage>, ArchiveError> {
    let row: Option<ArchiveRow> = on_db!(db, |c| sqlx::query_as(db.sql(
        "SELECT archived_at, sha256, size, compressed FROM {ir}.message_archive
              WHERE message_id = $1"
    ))
    .persistent(db.named())
    .bind(message_id)
    .fetch_optional(&mut *c)
    .await)?;
    let Some((archived_at, sha256, size, compressed)) = row else {
        return Ok(None);
    };
    let damaged = |reason: String| ArchiveError::Damaged {
        message_id: message_id.to_owned(),
        reason,
    };
    let bytes = decompress(&compressed, usize::try_from(size).unwrap_or(0))
        .map_err(|e| damaged(format!("cannot decompress it: {e}")))?;
    if sha2::Sha256::digest(&bytes)[..] != sha256[..] {
        return Err(damaged(
            "its bytes do not match the SHA-256 stored when it was sent".to_owned(),
        ));
    }
    Ok(Some(ArchivedMessage {
        message_id: message_id.to_owned(),
        archived_at,
        sha256,
        bytes,
    }))
}

/// Deletes up to [`CLEANUP_BATCH`] archived messages older than
/// `keep_days` days (database clock), oldest first. Returns how many.
pub async fn delete_expired(db: &Db, keep_days: u32) -> Result<u64, sqlx::Error> {
    on_db!(db, |c| sqlx::query(db.sql(
        "DELETE FROM {ir}.message_archive
          WHERE message_id IN (
                SELECT message_id FROM {ir}.message_archive
                 WHERE archived_at < now() - make_interval(days => $1)
                 ORDER BY archived_at
                 LIMIT $2)"
    ))
    .persistent(db.named())
    .bind(i32::try_from(keep_days).unwrap_or(i32::MAX))
    .bind(CLEANUP_BATCH)
    .execute(&mut *c)
    .await
    .map(|done| done.rows_affected()))
}

/// zlib (RFC 1950) at the default level: `python3 -c 'import zlib,sys;
/// sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))'`
/// reads a `compressed` value back.
pub(super) fn compress(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(bytes.len() / 2),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail; if it somehow did, the uncompressed
    // bytes are still a faithful (if larger) record.
    match encoder.write_all(bytes).and_then(|()| encoder.finish()) {
        Ok(compressed) => compressed,
        Err(_) => bytes.to_vec(),
    }
}

fn decompress(compressed: &[u8], size: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size);
    flate2::read::ZlibDecoder::new(compressed).read_to_end(&mut out)?;
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_message_decompresses_to_the_same_bytes() {
        let message = b"Subject: hi\r\n\r\nPay, please. Pay, please. Pay, please.\r\n".repeat(20);
        let compressed = compress(&message);
        assert!(compressed.len() < message.len() / 4);
        assert_eq!(decompress(&compressed, message.len()).unwrap(), message);
    }
}
