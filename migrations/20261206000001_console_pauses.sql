-- Pauses set in the operator console (docs/console.md): the source's own
-- paused / paused_until columns belong to the billing system, so the
-- console writes here. One row per paused invoice (invoice_id, the
-- source's key as text) or per paused customer (customer_id, customer
-- mode), with who paused it, when and why. The tick's "unpaid and not
-- paused" condition (db/owing.rs) anti-joins this small table through
-- its unique indexes.
CREATE TABLE console_pauses (
    invoice_id  TEXT,
    customer_id TEXT,
    reason      TEXT NOT NULL,
    paused_by   TEXT NOT NULL,
    paused_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((invoice_id IS NULL) <> (customer_id IS NULL))
);
CREATE UNIQUE INDEX console_pauses_invoice ON console_pauses (invoice_id)
    WHERE invoice_id IS NOT NULL;
CREATE UNIQUE INDEX console_pauses_customer ON console_pauses (customer_id)
    WHERE customer_id IS NOT NULL;

-- The console's search (invoice number, address) on the demo tables
-- behind the default source.relation; the invoice id (invoices_key) and a
-- customer's unpaid invoices (invoices_unpaid_customer_key) are indexed
-- already.
CREATE INDEX invoices_number ON invoices (number);
CREATE INDEX customers_email_lower ON customers (lower(email));
