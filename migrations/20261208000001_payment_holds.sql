-- Payment signals (docs/own-invoices.md, "Payment signals"): what a payment
-- provider or a bank said about an invoice before the billing database
-- learns of it. The worker owns both tables; nothing here is ever written
-- to the team's own database, and nothing here can un-pay an invoice.
--
-- Every signal acted on, by its provider's event id: a second delivery of
-- the same event is recognised and changes nothing. object_id is the
-- provider's object (a Stripe payment intent), so a later event that names
-- only that object (a dispute) finds the invoice of an earlier one.
CREATE TABLE payment_events (
    provider    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    signal      TEXT NOT NULL,
    invoice_id  TEXT,
    object_id   TEXT,
    event_at    TIMESTAMPTZ NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX payment_events_object ON payment_events (provider, object_id)
    WHERE object_id IS NOT NULL;

-- One row per invoice a signal named (the source's key as text; it may not
-- be in the source yet, and applies when it appears): its latest signal
-- by the provider's event time, so a late, older event never undoes a newer
-- one. state 'paid', 'pending' (until expires_at) and 'disputed' hold the
-- invoice's reminders: the owing condition (db/owing.rs) anti-joins this
-- table by its key. 'released' (a failed payment, a dispute won) and
-- 'lifted' (by an operator in the console) hold nothing.
CREATE TABLE payment_holds (
    invoice_id  TEXT PRIMARY KEY,
    state       TEXT NOT NULL
                CHECK (state IN ('paid', 'pending', 'disputed', 'released', 'lifted')),
    provider    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    event_at    TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ,
    changed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lifted_by   TEXT
);
