-- A run stopped by the send window's close ends 'window_closed': what it
-- claimed and had not handed to the relay went back unattempted, for the
-- window's next opening.
ALTER TABLE job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_outcome_check CHECK (outcome IN
    ('done', 'lost_lock', 'shutdown', 'smtp_unavailable', 'record_failed', 'smtp_auth_failed',
     'throttled', 'window_closed', 'error'));
