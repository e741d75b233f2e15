-- The suppression list and the bounce webhook (README, "Suppression list"
-- and "Bounce webhook").
--
-- A reminder whose recipients are all suppressed is not sent: its claimed
-- row is recorded 'skipped' (last_error says why: 'suppressed'). It keeps
-- its UNIQUE (invoice_id, period) claim, so that step is not tried again;
-- the invoice's later steps are claimed as usual (and skipped again while
-- the address stays suppressed).
DO $$
DECLARE
    c text;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
              WHERE conrelid = 'reminders'::regclass AND contype = 'c'
                AND pg_get_constraintdef(oid) LIKE '%status%'
    LOOP
        EXECUTE format('ALTER TABLE reminders DROP CONSTRAINT %I', c);
    END LOOP;
END $$;
ALTER TABLE reminders ADD CONSTRAINT reminders_status_check
    CHECK (status IN ('sending', 'sent', 'failed', 'discarded', 'skipped'));

-- Reminders a run skipped because every recipient was suppressed.
ALTER TABLE job_runs ADD COLUMN suppressed INTEGER NOT NULL DEFAULT 0;

-- Addresses no reminder goes to. One row per address, compared
-- case-insensitively (the unique index on lower(address) is also the
-- lookup the tick makes once per claimed batch).
--   reason  why: the operator's words (`suppress add --reason`), or the
--           webhook's kind: hard_bounce, complaint, unsubscribe
--   source  who added it: cli, webhook (Standard Webhooks), postmark
--   detail  what the webhook said (a bounce's diagnostic), if anything
CREATE TABLE suppressions (
    address       TEXT NOT NULL,
    reason        TEXT NOT NULL,
    source        TEXT NOT NULL,
    detail        TEXT NULL,
    suppressed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX suppressions_address ON suppressions (lower(address));

-- Webhook message ids (`webhook-id`) seen in the last 10 minutes, so a
-- replayed request is refused by every replica. Timestamps more than 5
-- minutes off are refused anyway, so 10 minutes of ids is enough; each
-- request prunes what is older.
CREATE TABLE webhook_ids (
    id          TEXT PRIMARY KEY,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhook_ids_received_at ON webhook_ids (received_at);
