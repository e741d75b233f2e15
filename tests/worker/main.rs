//! The worker against real PostgreSQL, Redis and an SMTP server, called
//! through the library (`run_tick`, `work_period`), one module per theme.

#[path = "../common/mod.rs"]
mod common;

mod calendars;
mod claims;
mod cli;
mod config;
mod costs;
mod customers;
mod delivery;
mod edges;
mod explain;
mod fencing;
mod late_payment;
mod limits;
mod locking;
mod mail_headers;
mod operator;
mod outages;
mod plans;
mod proof;
mod relays;
mod retries;
mod riding;
mod send_window;
mod source;
mod stages;
mod suppression;
mod templates;
mod throttling;
mod upgrade;
mod zones;
