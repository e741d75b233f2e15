-- The operator console (docs/console.md): its sessions and its activity log.
--
-- console_sessions: one row per signed-in browser. The cookie carries a
-- random token; only its SHA-256 is stored, so a leaked table signs no one
-- in. csrf is the per-session token every form posts back. A session ends
-- at expires_at (console.session_ttl after sign-in) or when its row is
-- deleted (sign-out). Kept here, not in the console's memory, so a session
-- survives a restart and works across several console replicas.
CREATE TABLE console_sessions (
    token_sha256 BYTEA PRIMARY KEY,
    user_name    TEXT NOT NULL,
    csrf         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- Every action taken in the console, written in the same transaction as
-- the change it records: who, what, on what, why, and which rows changed.
CREATE TABLE console_activity (
    id        BIGSERIAL PRIMARY KEY,
    at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    user_name TEXT NOT NULL,
    action    TEXT NOT NULL,
    subject   TEXT NOT NULL,
    reason    TEXT,
    rows      BIGINT[] NOT NULL DEFAULT '{}'
);
CREATE INDEX console_activity_at ON console_activity (at DESC);
