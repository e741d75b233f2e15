//! The fault suite: the compiled binary as several real processes against
//! real PostgreSQL, Redis and SMTP, while the tests kill, pause, partition
//! and starve them. Every scenario ends with the same check, from the
//! database and from the mail actually received: no (invoice, period)
//! mailed twice; every overdue invoice reminded, except rows audit reports
//! as unknown, and no more of those than were in flight.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod ahead;
mod bad_input;
mod clock;
mod customers;
mod exits;
mod holds;
mod http;
mod last_moment;
mod listener;
mod lock_failure;
mod payments;
mod pgbouncer;
mod postgres;
mod random;
mod redis_outage;
mod replicas;
mod secrets;
mod shutdown;
mod signals;
mod smtp;
mod soak;
mod source;
mod stripe_versions;
mod webhook;
mod webhook_input;
