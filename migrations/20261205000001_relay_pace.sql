-- The pace the SMTP relay was last found to take (docs/operating.md, "A relay
-- that throttles"): one row per relay (smtp.host:smtp.port), shared by every
-- replica. A tick the relay throttled halves the rate it accepted and the
-- connections; each tick it did not throttle adds a step back, up to
-- smtp.max_per_second and smtp.pool_size.
--   per_second           the rate the next tick sends at; NULL: no limit
--   connections          the connections it opens at most
--   accepted_per_second  the rate the relay accepted before it last throttled
--   throttled_at         when it last throttled
CREATE TABLE relay_pace (
    relay               TEXT PRIMARY KEY,
    per_second          DOUBLE PRECISION NULL,
    connections         INTEGER NOT NULL,
    accepted_per_second DOUBLE PRECISION NULL,
    throttled_at        TIMESTAMPTZ NULL,
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A run the relay throttled ends 'throttled': the relay is up and took what
-- it would; the rest goes on the next tick, slower.
ALTER TABLE job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_outcome_check CHECK (outcome IN
    ('done', 'lost_lock', 'shutdown', 'smtp_unavailable', 'record_failed', 'smtp_auth_failed',
     'throttled', 'error'));
