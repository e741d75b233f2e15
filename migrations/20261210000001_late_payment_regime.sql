-- Late-payment interest (docs/late-payment.md): the demo customers choose
-- their regime, and the default source exposes it as the optional column
-- `late_payment_regime` (NULL: late_payment.regime).
ALTER TABLE customers ADD COLUMN late_payment_regime TEXT NULL;

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
       c.late_payment_regime       AS late_payment_regime
  FROM invoices i
  JOIN customers c ON c.id = i.customer_id;
