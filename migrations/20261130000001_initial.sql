-- The schema of invoice-reminder. Column names invoices.id/due_date/paid_at,
-- reminders.invoice_id/period/status and the status values 'sending' and
-- 'sent' are a contract: operators and external tests query them.

CREATE TABLE customers (
    id    BIGSERIAL PRIMARY KEY,
    name  TEXT NOT NULL,
    email TEXT NOT NULL
);

CREATE TABLE invoices (
    id           BIGSERIAL PRIMARY KEY,
    customer_id  BIGINT NOT NULL REFERENCES customers (id),
    number       TEXT NOT NULL,
    -- A reminder for a negative amount makes no sense: refuse it here.
    amount_cents BIGINT NOT NULL CHECK (amount_cents >= 0),
    currency     TEXT NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    due_date     DATE NOT NULL,
    paid_at      TIMESTAMPTZ NULL
);

-- The overdue query walks this partial index in (due_date, id) order: only
-- unpaid invoices are in it, and the range due_date < cutoff stops at the
-- first invoice not yet overdue, so the cost grows with overdue invoices,
-- not with the (mostly paid) ledger.
CREATE INDEX invoices_unpaid_due_date_id ON invoices (due_date, id) WHERE paid_at IS NULL;
CREATE INDEX invoices_customer_id ON invoices (customer_id);

-- One row per tick that took the lock. finished_at is NULL while it runs
-- (or forever, if the process died).
CREATE TABLE job_runs (
    id          BIGSERIAL PRIMARY KEY,
    replica_id  TEXT NOT NULL,
    -- NULL when the tick ran without a lock (lock.on_backend_error = "database-only").
    lock_token  UUID NULL,
    period      TEXT NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ NULL,
    outcome     TEXT NULL CHECK (outcome IN ('done', 'lost_lock', 'shutdown', 'smtp_unavailable', 'error')),
    claimed     INTEGER NOT NULL DEFAULT 0,
    sent        INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0,
    error       TEXT NULL
);
CREATE INDEX job_runs_started_at ON job_runs (started_at);

-- The second line of defence. A row is inserted (claimed) BEFORE the mail is
-- sent; the UNIQUE (invoice_id, period) constraint makes a second claim of
-- the same reminder impossible, whatever the lock did.
--
-- status:
--   sending   claimed by run_id; the mail is being (or was being) sent.
--             A row left here by a dead process has an unknown delivery and
--             is never resent automatically (at-most-once); audit lists it.
--   sent      the SMTP server accepted the mail (sent_at, message_id).
--   failed    a transient failure; re-claimed by a later tick while
--             attempts < reminders.max_attempts.
--   discarded final: permanent SMTP rejection, invalid data, or attempts
--             exhausted. last_error says why.
CREATE TABLE reminders (
    id         BIGSERIAL PRIMARY KEY,
    invoice_id BIGINT NOT NULL REFERENCES invoices (id),
    period     TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('sending', 'sent', 'failed', 'discarded')),
    attempts   INTEGER NOT NULL DEFAULT 0,
    run_id     BIGINT NULL REFERENCES job_runs (id),
    message_id TEXT NULL,
    last_error TEXT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the current claim was taken (differs from created_at after a retry).
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at    TIMESTAMPTZ NULL,
    CONSTRAINT reminders_invoice_id_period_key UNIQUE (invoice_id, period)
);
CREATE INDEX reminders_retryable ON reminders (period, id) WHERE status = 'failed';
CREATE INDEX reminders_sending ON reminders (claimed_at) WHERE status = 'sending';
CREATE INDEX reminders_run_id ON reminders (run_id);
