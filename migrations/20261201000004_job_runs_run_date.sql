-- job_runs.period held the tick's date (its "today"), while
-- reminders.period is a step key (`overdue`, `final-2`): one word, two
-- meanings. The run's column is now run_date; reminders.period stays.
-- No alias is kept: every reader is in this repository.
ALTER TABLE job_runs RENAME COLUMN period TO run_date;
