-- What a tick reads of `reminders` per row, and what it writes (BENCHMARKS.md,
-- "Lookups that read a bounded number of rows" and "The mark window").
--
-- Every per-row lookup of the send path (the gap, "no reminder for this
-- step yet", a thread's Message-IDs) reads one invoice's or one customer's
-- reminders through the index its key leads (reminders_invoice_id_period_key,
-- reminders_customer_claimed) and nothing else: the lookup's other conditions
-- are kept out of the index scan (db/owing.rs, reminders_of!). So an index
-- over a set that grows with every reminder sent can never be combined with
-- it, whoever adds one. The console's indexes therefore stay: they serve the
-- overview's reads, and tests/worker/costs.rs runs every tick beside them and
-- beside more of the kind, failing if the rows read per reminder grow.
COMMENT ON INDEX reminders_claimed_day IS
    'console overview only (the last 30 days by outcome); never read per row by a tick';
COMMENT ON INDEX reminders_sent_day IS
    'console overview only (sent today); never read per row by a tick';
COMMENT ON INDEX reminders_open_status IS
    'console overview only (reminders by status but sent); never read per row by a tick';

-- A mark (started_at, last_attempt_at and the Message-ID its mail carries)
-- changes no indexed column once the Message-ID is no longer indexed, so it
-- is a HOT update: no index entries, where it wrote one in every index.
-- Unknown rows are few; `resolve` finds the rows that share a Message-ID
-- among the rows in flight (reminders_in_flight).
DROP INDEX IF EXISTS reminders_unknown_message;
