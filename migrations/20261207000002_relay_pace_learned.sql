-- The pacer's learnt rate (docs/operating.md, "A relay that throttles"):
-- the rate the relay accepted between two throttles, held a little below,
-- raised by a tenth after each five quiet minutes, dropped after three.
--   per_second           the rate sends are held to; NULL: no limit
--   accepted_per_second  the rate the relay accepted between its last two
--                        throttles
--   throttled_at         when it last throttled (a pause began)
--   raises               raises since then
--   quiet_since          the last throttle or raise, from which the next
--                        raise counts
-- `connections` is kept for older replicas and holds smtp.pool_size.
ALTER TABLE relay_pace
    ADD COLUMN raises INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN quiet_since TIMESTAMPTZ NULL;
