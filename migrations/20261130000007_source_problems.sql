-- Source rows a run skipped because they cannot make a reminder (a repeated
-- key, a NULL, a bad currency or address): README, "Using your own
-- invoices". Counted once per key and run; `check-source` lists them.
ALTER TABLE job_runs ADD COLUMN source_problems INTEGER NOT NULL DEFAULT 0;
