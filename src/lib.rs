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
//! * [`cli`]: the command line's shape, and the dispatch to the commands
//!   and the console.
//! * [`console`]: the operator console's pages; [`commands`]: one file per
//!   subcommand, printing and setting exit codes. Neither imports the
//!   other, and neither reads a table: both ask the operator's desk.
//! * [`operator`]: what the operator asks and decides, once for both faces,
//!   through its [`operator::desk::Desk`] (the database, the settings and
//!   today, read once): explain, the audit, the survey of what is owed, the
//!   overview's counts, unknown mails and settling, suppression, pauses and
//!   payment holds, archived messages, previews, sign-ins.
//! * [`shutdown`]: the shutdown sequence, signal to release, in one place.
//! * [`http`]: `/healthz`, `/readyz`, `/metrics`, the bounce webhook and
//!   the payment signals (with Stripe's lookups); [`schedule`]: cron wiring
//!   and fire computation, one tick at a time.
//! * [`tick`]: one tick; [`tick::context`] what it needs,
//!   `tick::pipeline` claim → mark → send → record, [`tick::deferred`]
//!   results kept while the database is away.
//! * [`lock`]: the lease model (design note), Redis and PostgreSQL backends,
//!   the watchdog; [`problems`]: which source rows cannot make a reminder.
//! * [`db`]: all SQL; [`db::reminders`] is the claim protocol,
//!   [`db::options`] the PostgreSQL connection options. [`mail`]: building a
//!   message, and SMTP with known-or-unknown outcomes. [`telemetry`]: logs.
//! * [`config`]: typed settings, defaults compiled in from
//!   `config/default.toml`, validated once; [`metrics`]: the Prometheus
//!   metrics; [`liveness`]: is the scheduler loop alive.
//! * [`stages`]: which step an invoice owes (its step key is stored in
//!   the column `period`); [`locale`]: language tags; [`dkim`]: the signing
//!   key; [`late_payment`]: the interest and compensation a late invoice
//!   is claimed by law, priced exactly from the reference rates.
//! * [`domain`]: the plain values the layers exchange (ids, invoice,
//!   customer, delivery, counts).

pub mod causes;
pub mod cli;
pub mod commands;
pub mod config;
pub mod console;
pub mod db;
pub mod dkim;
pub mod domain;
pub mod http;
pub mod late_payment;
pub mod liveness;
pub mod locale;
pub mod lock;
pub mod mail;
pub mod metrics;
pub mod operator;
pub mod problems;
pub mod schedule;
pub mod shutdown;
pub mod stages;
pub mod telemetry;
pub mod tick;
