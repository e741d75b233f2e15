-- Payment holds per payment object (docs/own-invoices.md, "Payment
-- signals"): an invoice is held while any of its payment objects holds
-- it, so one object's failure never ends another's hold.
--
-- payment_holds: one row per (invoice, provider, object): a Stripe
-- PaymentIntent, Charge, Checkout Session, Invoice or dispute; '' for the
-- generic signal, which names only the invoice. Each row follows its
-- object's newest event by the provider's time, equal times decided by
-- meaning (`rank`: paid 6, lost 5, disputed 4, settled 3, pending 2,
-- released 1), never by arrival. 'lost' (a dispute lost) holds until an
-- operator lifts it; 'settled' (a payment that arrived, which pays only
-- part of a Stripe invoice) and 'booked' (a paid hold the books caught up
-- with) hold nothing.
ALTER TABLE payment_holds DROP CONSTRAINT payment_holds_pkey;
ALTER TABLE payment_holds DROP CONSTRAINT payment_holds_state_check;
ALTER TABLE payment_holds ADD COLUMN object_id TEXT NOT NULL DEFAULT '';
ALTER TABLE payment_holds ADD COLUMN rank SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE payment_holds ADD PRIMARY KEY (invoice_id, provider, object_id);
ALTER TABLE payment_holds ADD CONSTRAINT payment_holds_state_check
    CHECK (state IN ('paid', 'pending', 'disputed', 'lost', 'settled', 'released', 'lifted', 'booked'));
UPDATE payment_holds h SET object_id = COALESCE(e.object_id, ''),
       rank = CASE h.state WHEN 'paid' THEN 6 WHEN 'disputed' THEN 4 WHEN 'pending' THEN 2 ELSE 1 END
  FROM payment_events e
 WHERE e.provider = h.provider AND e.event_id = h.event_id;
-- The paid holds, for the tick's check of them against the books.
CREATE INDEX payment_holds_paid ON payment_holds (invoice_id) WHERE state = 'paid';

-- What a provider's events taught about its objects: an object names our
-- invoice (`invoice_id`), or another object that does (`via`: a
-- PaymentIntent its Stripe invoice, a Charge its PaymentIntent). The
-- first answer learnt stays.
CREATE TABLE payment_links (
    provider   TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    invoice_id TEXT,
    via        TEXT,
    event_id   TEXT NOT NULL,
    learnt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, object_id),
    CHECK (invoice_id IS NOT NULL OR via IS NOT NULL)
);
CREATE INDEX payment_links_via ON payment_links (provider, via) WHERE via IS NOT NULL;

-- An event keeps the objects it names (`refs`, in the order they are
-- tried); one that found no invoice (`invoice_id` NULL) is unlinked, and
-- applies when a later event links one of them.
ALTER TABLE payment_events ADD COLUMN refs TEXT[] NOT NULL DEFAULT '{}';
UPDATE payment_events SET refs = ARRAY[object_id] WHERE object_id IS NOT NULL;
CREATE INDEX payment_events_unlinked ON payment_events USING gin (refs) WHERE invoice_id IS NULL;
