-- Fencing tokens (Kleppmann): every lock acquisition gets a number that
-- grows with each acquisition; every claim advances the lock's high-water
-- mark only if its token is not older, so a paused holder that wakes up
-- after a newer holder has written cannot claim anything.

-- One row per lock key: the newest token that has written.
CREATE TABLE lock_fences (
    lock_key TEXT PRIMARY KEY,
    token    BIGINT NOT NULL
);

-- Tokens for the postgres lock backend (the Redis backend INCRs a key).
CREATE SEQUENCE lock_fence_seq;

ALTER TABLE job_runs ADD COLUMN fence_token BIGINT NULL;
ALTER TABLE reminders ADD COLUMN fence_token BIGINT NULL;
