-- A customer's invoices, paid ones included, by the customer as text: what
-- `explain --customer` and the console's customer page read (db/explain.rs,
-- `customer_source_rows`). Without it, each read scans every invoice of
-- the demo tables behind the default source.relation
-- (BENCHMARKS.md, "The console at 1M reminders"). invoices_unpaid_customer_key
-- serves the tick, which reads unpaid invoices only.
CREATE INDEX invoices_customer_key ON invoices ((customer_id::text));
