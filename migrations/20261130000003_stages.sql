-- Reminder stages (see README, "Writing your reminders").
--
-- reminders.period now holds the STEP key the claim is for ("upcoming",
-- "overdue", "final", "final-2", ...) instead of a date: UNIQUE (invoice_id,
-- period) means "each step at most once per invoice". Rows written before
-- this migration keep their date keys and block nothing new.

-- BCP 47 tag ("de", "de-CH"); NULL: templates.default_locale.
ALTER TABLE customers ADD COLUMN locale TEXT NULL;
-- No reminders at all for this customer while true.
ALTER TABLE customers ADD COLUMN reminders_paused BOOLEAN NOT NULL DEFAULT false;
-- No reminders for this invoice up to and including this date (a dispute, a
-- promise to pay); compared with the worker's "today" (schedule.timezone).
ALTER TABLE invoices ADD COLUMN reminders_paused_until DATE NULL;
