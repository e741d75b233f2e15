-- Reliability (see README, "What is guaranteed").

-- The clock "today" is read from. Always now(); tests replace it in their
-- own database to put the database clock behind or ahead of the replicas.
CREATE FUNCTION invoice_reminder_clock() RETURNS timestamptz
    LANGUAGE sql STABLE AS 'SELECT now()';

-- When the current delivery attempt began; retries wait
-- reminders.retry_backoff (doubling per attempt) from it.
ALTER TABLE reminders ADD COLUMN last_attempt_at TIMESTAMPTZ NULL;
-- When this claim's send was started. NULL: never handed to SMTP, so a
-- crashed run's row can be returned safely (README, "What is guaranteed").
ALTER TABLE reminders ADD COLUMN started_at TIMESTAMPTZ NULL;

-- Until when a run's lease may still be trusted, by the database clock;
-- extended while the run works. A run past it (and not finished) is over.
ALTER TABLE job_runs ADD COLUMN lease_until TIMESTAMPTZ NULL;
-- Which lock the run's fencing token was drawn for.
ALTER TABLE job_runs ADD COLUMN lock_key TEXT NULL;
CREATE INDEX job_runs_lock_key_fence ON job_runs (lock_key, fence_token);

-- A fencing token is a (number, holder) pair: after a counter reset two
-- holders may draw the same number, and only the one that wrote it first
-- may write with it again.
ALTER TABLE lock_fences ADD COLUMN holder UUID NULL;

ALTER TABLE job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_outcome_check CHECK (outcome IN
    ('done', 'lost_lock', 'shutdown', 'smtp_unavailable', 'record_failed', 'smtp_auth_failed', 'error'));
