-- Deliveries an earlier version left unknown stay unknown (README,
-- "Upgrading").
--
-- Before 20261130000004 no version recorded when a send started, nor a
-- lease for its run. That migration added reminders.started_at as NULL to
-- the rows already `sending`, which reads "never handed to SMTP: return it
-- and send it again", though those rows are exactly what the earlier
-- version could not settle: a send whose reply never came (its run
-- finished), or a process that died mid-send. And their runs, with neither
-- lease_until nor finished_at, never counted as over, so `audit` and
-- `resolve` never saw them.
--
-- Every version since 20261130000004 writes lease_until in the statement
-- that records a run, so a run without one was recorded by an earlier
-- version. Its `sending` rows count as started when they were claimed
-- (unknown: never resent by themselves; `resolve` settles them). Rows
-- claimed by a later version belong to a run with a lease; their NULL
-- started_at means what it says (never started) and is left alone. A row
-- whose run_id was cleared (its run pruned) may be either: it counts as
-- started, the safe side.
UPDATE reminders r
   SET started_at = r.claimed_at,
       last_attempt_at = COALESCE(r.last_attempt_at, r.claimed_at)
 WHERE r.status = 'sending' AND r.started_at IS NULL
   AND (r.run_id IS NULL
        OR EXISTS (SELECT 1 FROM job_runs j WHERE j.id = r.run_id AND j.lease_until IS NULL));

-- Those runs that never finished are over: their process died, or is an
-- earlier version's, and those are stopped before `migrate` (README,
-- "Upgrading"). Their lease is recorded as ending at their last sign of
-- life, the last claim they made.
UPDATE job_runs j
   SET lease_until = GREATEST(j.started_at,
                              (SELECT max(r.claimed_at) FROM reminders r WHERE r.run_id = j.id))
 WHERE j.lease_until IS NULL AND j.finished_at IS NULL;
