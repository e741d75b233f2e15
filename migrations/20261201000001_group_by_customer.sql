-- One mail per customer (reminders.group_by = "customer"; README, "One
-- mail per customer").
--
-- Which customer a reminder was claimed for, in customer mode (NULL in
-- invoice mode): `min_days_between` then counts per customer, and the mail's
-- rows share one Message-ID. Set at the claim and never updated, so the
-- status updates stay HOT.
ALTER TABLE reminders ADD COLUMN customer_id TEXT NULL;
CREATE INDEX reminders_customer_recent ON reminders (customer_id, created_at)
    WHERE customer_id IS NOT NULL;

-- The default source exposes the demo customer as `customer_id`, and the
-- demo tables get the index customer mode looks a customer's unpaid
-- invoices up by (on the key as the view exposes it).
CREATE OR REPLACE VIEW reminder_source AS
SELECT i.id::text                  AS invoice_id,
       i.number                    AS invoice_number,
       c.name                      AS customer_name,
       c.email                     AS email,
       c.locale                    AS locale,
       i.amount_cents              AS amount_minor,
       i.currency                  AS currency,
       i.due_date                  AS due_date,
       i.paid_at IS NOT NULL       AS is_paid,
       c.reminders_paused          AS paused,
       i.reminders_paused_until    AS paused_until,
       NULL::text                  AS payment_url,
       i.customer_id::text         AS customer_id
  FROM invoices i
  JOIN customers c ON c.id = i.customer_id;
CREATE INDEX invoices_unpaid_customer_key
    ON invoices ((customer_id::text), due_date) WHERE paid_at IS NULL;
