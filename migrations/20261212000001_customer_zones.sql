-- The customer's own day (docs/send-window.md): the demo customers get a
-- zone and a holiday calendar, and the default source exposes them as the
-- optional columns `timezone` and `holiday_calendar` (NULL: the send
-- window's).
ALTER TABLE customers ADD COLUMN timezone TEXT NULL;
ALTER TABLE customers ADD COLUMN holiday_calendar TEXT NULL;

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
       i.customer_id::text         AS customer_id,
       c.late_payment_regime       AS late_payment_regime,
       c.timezone                  AS timezone,
       c.holiday_calendar          AS holiday_calendar
  FROM invoices i
  JOIN customers c ON c.id = i.customer_id;
