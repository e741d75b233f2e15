-- One mail per customer, as trustworthy as one per invoice (docs/how-it-works.md,
-- "One mail per customer").
--
-- continued: the statement this row went out in left owed invoices of its
-- customer for the next tick (reminders.max_invoices_per_mail). The next
-- statement continues the same round of mail, so the customer gap
-- (min_days_between) does not hold it back; a statement that left nothing
-- behind starts the gap.
ALTER TABLE reminders ADD COLUMN continued BOOLEAN NOT NULL DEFAULT false;

-- The gap counts from a reminder's claim (a retry's claim is its mail), not
-- from when its row was first made: the customer gap probes this index.
CREATE INDEX reminders_customer_claimed ON reminders (customer_id, claimed_at)
    WHERE customer_id IS NOT NULL;
DROP INDEX IF EXISTS reminders_customer_recent;

-- Every row marked started stores the Message-ID its mail carries before the
-- mail goes out; unknown deliveries are looked up, and settled, by it (a
-- statement's rows share one).
CREATE INDEX reminders_unknown_message ON reminders (message_id)
    WHERE status = 'sending' AND message_id IS NOT NULL;

-- Steps recorded 'skipped' because they could no longer be sent within
-- their window (the gap held them back past it): counted per run.
ALTER TABLE job_runs ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
