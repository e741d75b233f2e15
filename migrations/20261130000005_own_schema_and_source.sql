-- Our own schema, and invoices read from a source relation (README, "Using
-- your own invoices" and "Upgrading").
--
-- `invoice-reminder migrate` runs every migration with search_path set to
-- database.schema alone, so on a fresh install the objects of the earlier
-- migrations were created there. An install from before this migration has
-- them in public: move them, each only if the schema has none of that name
-- yet, so a table of the user's own (a public.invoices of another shape) is
-- never touched.
DO $$
DECLARE
    t text;
BEGIN
    IF current_schema() IS NOT NULL AND current_schema() <> 'public' THEN
        FOREACH t IN ARRAY ARRAY['customers', 'invoices', 'job_runs', 'reminders', 'lock_fences'] LOOP
            IF to_regclass(format('public.%I', t)) IS NOT NULL
               AND to_regclass(format('%I.%I', current_schema(), t)) IS NULL THEN
                EXECUTE format('ALTER TABLE public.%I SET SCHEMA %I', t, current_schema());
            END IF;
        END LOOP;
        IF to_regclass('public.lock_fence_seq') IS NOT NULL
           AND to_regclass(format('%I.lock_fence_seq', current_schema())) IS NULL THEN
            EXECUTE format('ALTER SEQUENCE public.lock_fence_seq SET SCHEMA %I', current_schema());
        END IF;
        IF to_regprocedure('public.invoice_reminder_clock()') IS NOT NULL
           AND to_regprocedure(format('%I.invoice_reminder_clock()', current_schema())) IS NULL THEN
            EXECUTE format('ALTER FUNCTION public.invoice_reminder_clock() SET SCHEMA %I', current_schema());
        END IF;
    END IF;
END $$;

-- reminders.invoice_id is the source's key: text, whatever the billing
-- system uses (bigint, uuid, "INV-2026-0042"), with no foreign key.
ALTER TABLE reminders DROP CONSTRAINT IF EXISTS reminders_invoice_id_fkey;
ALTER TABLE reminders ALTER COLUMN invoice_id TYPE text USING invoice_id::text;

-- The demo tables' index for the scan, on the key as the source exposes it
-- (text, compared byte-wise: COLLATE "C"), and one for lookups by key.
CREATE INDEX invoices_unpaid_due_date_key
    ON invoices (due_date, (id::text) COLLATE "C") WHERE paid_at IS NULL;
CREATE INDEX invoices_key ON invoices ((id::text));
DROP INDEX invoices_unpaid_due_date_id;

-- The default source.relation: the demo tables through the source contract.
CREATE VIEW reminder_source AS
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
       NULL::text                  AS payment_url
  FROM invoices i
  JOIN customers c ON c.id = i.customer_id;
