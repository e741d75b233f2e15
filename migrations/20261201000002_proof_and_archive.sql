-- Proof of acceptance and the message archive (README, "Operating it",
-- "Archive and proof of acceptance").
--
-- Every row the SMTP server accepted keeps the server's final reply to the
-- message ("250 2.0.0 Ok: queued as 4F3X2") and the SHA-256 of the exact
-- bytes handed to DATA. Written by the same statement that records the
-- result (no extra write per reminder). NULL on rows sent before this
-- migration.
ALTER TABLE reminders ADD COLUMN smtp_reply TEXT NULL;
ALTER TABLE reminders ADD COLUMN message_sha256 BYTEA NULL;

-- archive.store = "database": each sent message itself, zlib-compressed,
-- keyed by its Message-ID (one message, however many reminder rows it
-- settles; a resend of the same reminder replaces it). The tick deletes
-- rows older than archive.keep_days, oldest first, through the index on
-- archived_at.
CREATE TABLE message_archive (
    message_id  TEXT PRIMARY KEY,
    archived_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- SHA-256 of the uncompressed bytes: reminders.message_sha256.
    sha256      BYTEA NOT NULL,
    -- Uncompressed length in bytes.
    size        INTEGER NOT NULL,
    compressed  BYTEA NOT NULL
);
-- Already compressed: PostgreSQL should not try again.
ALTER TABLE message_archive ALTER COLUMN compressed SET STORAGE EXTERNAL;
CREATE INDEX message_archive_archived_at ON message_archive (archived_at);
