-- The console overview's reads (src/db/overview.rs, db::console::overview_counts),
-- each an index range instead of a pass over every reminder ever sent:
--   reminders_claimed_day   the last 30 days by outcome: claimed_at ranges, status from the index
--   reminders_sent_day      sent today: a sent_at range of the sent rows
--   reminders_open_status   reminders by status but 'sent': the few open and final rows
-- On a large table each takes a pass to build, once, at `migrate`.
CREATE INDEX reminders_claimed_day ON reminders (claimed_at) INCLUDE (status);
CREATE INDEX reminders_sent_day ON reminders (sent_at) WHERE status = 'sent';
CREATE INDEX reminders_open_status ON reminders (status) WHERE status <> 'sent';
