-- Room on a reminder's page for its started mark (BENCHMARKS.md, "Room for
-- every mark", says why and what it costs).
--
-- A claim inserts a row; its mark (started_at, message_id: no indexed
-- column) is a HOT update only where the row's page has room for a second
-- version, and then writes no index entry. At 70 % a page had room for
-- about a third of its rows' marks; at 30 % for all of them, and the
-- result (which changes the status, so it is never HOT) often lands on
-- the same page too. Only pages written from now on are filled this way.
ALTER TABLE reminders SET (fillfactor = 30);
