//! # invoice-reminder
//!
//! A scheduled worker that emails customers about overdue invoices, built to
//! run as any number of replicas without ever sending the same reminder
//! twice.
//!
//! Two lines of defence:
//! 1. a lease ([`lock`]): a Redis key with a unique token, or a PostgreSQL
//!    session advisory lock, renewed by a watchdog that cancels the work when
//!    the lease is lost, so normally one replica works a tick;
//! 2. the database ([`db::reminders`]): each reminder is claimed under
//!    UNIQUE (invoice_id, period) *before* its mail is sent, with the
//!    holder's fencing token, so a second or stale sender is refused even
//!    when the lock fails.
//!
//! Delivery is at-most-once: a process that dies between the SMTP server's
//! acceptance and the status update leaves a `sending` row whose fate is
//! unknown; it is never resent, and `audit` lists it.
//!
//! ## Layout
//! Read [`tick`] first: the job top to bottom. Imports run down this list,
//! never up, and no two files import each other (`tests/layers` checks
//! both):
//! * [`console`]: the operator console's pages, over the commands.
//! * [`commands`]: one file per subcommand; `main` maps their errors to
//!   exit codes.
//! * [`shutdown`]: the shutdown sequence, signal to release, in one place.
//! * [`http`]: `/healthz`, `/readyz`, `/metrics` and the bounce webhook;
//!   [`schedule`]: cron wiring and fire computation, one tick at a time.
//! * [`tick`]: one tick; [`tick::context`] what it needs,
//!   `tick::pipeline` claim → mark → send → record, [`tick::deferred`]
//!   results held while the database is away.
//! * [`lock`]: the lease model (design note), Redis and PostgreSQL backends,
//!   the watchdog; [`problems`]: which source rows cannot make a reminder.
//! * [`db`]: all SQL; [`db::reminders`] is the claim protocol,
//!   [`db::session`] the PostgreSQL session settings. [`mail`]: building a
//!   message, and SMTP with known-or-unknown outcomes. [`telemetry`]: logs.
//! * [`config`]: typed settings, defaults compiled in from
//!   `config/default.toml`, validated once; [`metrics`]: the Prometheus
//!   metrics; [`liveness`]: is the scheduler loop alive.
//! * [`stages`]: which step an invoice owes (the step key is a reminder's
//!   `period`); [`locale`]: language tags; [`dkim`]: the signing key.
//! * [`domain`]: the plain values the layers exchange (ids, invoice,
//!   customer, delivery, counts); [`cli`]: the command line's shape.

pub mod causes;
pub mod cli;
pub mod commands;
pub mod config;
pub mod console;
pub mod db;
pub mod dkim;
pub mod domain;
pub mod http;
pub mod liveness;
pub mod locale;
pub mod lock;
pub mod mail;
pub mod operator;
pub mod metrics;
pub mod problems;
pub mod schedule;
pub mod shutdown;
pub mod stages;
pub mod telemetry;
pub mod tick;
