//! # invoice-reminder
//!
//! A scheduled worker that emails customers about overdue invoices, built to
//! run as any number of replicas without ever sending the same reminder
//! twice.
//!
//! Two lines of defence:
//! 1. a lease ([`lock`]): a Redis key with a unique token, renewed by a
//!    watchdog that cancels the work when the lease is lost, so normally
//!    one replica works a tick;
//! 2. the database ([`db::reminders`]): each reminder is claimed under
//!    UNIQUE (invoice_id, period) *before* its mail is sent, so a second
//!    sender is refused even when the lock fails.
//!
//! Delivery is at-most-once: a process that dies between the SMTP server's
//! acceptance and the status update leaves a `sending` row whose fate is
//! unknown; it is never resent, and `audit` lists it.
//!
//! ## Layout
//! * [`config`]: typed settings, loaded and validated once.
//! * [`telemetry`]: structured logging.
//! * [`shutdown`]: the SIGTERM/SIGINT token.
//! * [`lock`]: the lease model (design note), the Redis backend, the watchdog.
//! * [`db`]: all SQL: invoices, reminders (the claim protocol), runs, audit, seed.
//! * [`period`]: the period key (`2026-11-30`, `2026-W49`, `2026-11`).
//! * [`mailer`]: message building and SMTP with known-or-unknown outcomes.
//! * [`reminders`]: one tick, returning a [`reminders::TickOutcome`].
//! * [`scheduler`]: cron wiring; one tick at a time.
//! * [`context`]: what a tick needs, built from the settings.
//! * [`cli`], [`commands`]: the command line.

pub mod cli;
pub mod commands;
pub mod config;
pub mod context;
pub mod db;
pub mod lock;
pub mod mailer;
pub mod period;
pub mod reminders;
pub mod scheduler;
pub mod shutdown;
pub mod telemetry;
