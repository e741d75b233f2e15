//! PostgreSQL connection options, in one place: sent as startup options on a
//! direct connection, and (behind a transaction pooler, which refuses
//! unknown startup options and carries nothing from one transaction to the
//! next) set at the start of every transaction instead.
//!
//! `plan_cache_mode = force_custom_plan`: sqlx prepares every statement,
//! and after a few executions PostgreSQL may switch a prepared statement
//! to a generic plan that ignores the parameters. For the overdue page
//! (`LIMIT $n`, a keyset cursor) a generic plan can be a full scan and
//! sort per page, turning a backlog into quadratic work; planning each
//! execution costs far less (BENCHMARKS.md, "The per-row probe"). Behind
//! a pooler, statements are unnamed and so always planned with their
//! parameters.
//!
//! `idle_in_transaction_session_timeout` = `database.statement_timeout`: a
//! transaction of ours left idle this long (its process paused or hung
//! mid-claim) is ended by the server, so it cannot block the others'
//! claims any longer than a statement may take.
//!
//! `jit = off`: the scan's per-row probes make PostgreSQL estimate a page
//! at far above `jit_above_cost`, and compiling it cost more than running
//! it; these are short OLTP statements (BENCHMARKS.md, "No JIT").
//!
//! `extra_float_digits` is left out (we read no floats that need it), and
//! `application_name` names the replica, so `pg_stat_activity` shows who is
//! connected.

use sqlx::postgres::PgConnectOptions;

use crate::config::{DatabaseSettings, Pooler, Settings};

/// Options for one PostgreSQL connection of this replica.
pub fn connect_options(settings: &Settings) -> PgConnectOptions {
    let options = settings
        .database
        .url
        .options()
        .clone()
        .application_name(&application_name(&settings.replica_id))
        .extra_float_digits(None);
    match settings.database.pooler {
        Pooler::None => options.options([
            ("plan_cache_mode", "force_custom_plan".to_owned()),
            ("jit", "off".to_owned()),
            (
                "idle_in_transaction_session_timeout",
                idle_in_transaction(database_timeout_ms(&settings.database)),
            ),
        ]),
        Pooler::Transaction => options,
    }
}

/// How each transaction starts: plain `BEGIN` on a direct connection, and
/// behind a transaction pooler `BEGIN` with the session settings a pooled
/// server connection cannot be given at startup.
pub(super) fn begin_statement(database: &DatabaseSettings) -> String {
    match database.pooler {
        Pooler::None => "BEGIN".to_owned(),
        Pooler::Transaction => format!(
            "BEGIN; SET LOCAL jit = off; SET LOCAL idle_in_transaction_session_timeout = {}",
            database_timeout_ms(database)
        ),
    }
}

fn database_timeout_ms(database: &DatabaseSettings) -> u128 {
    database.statement_timeout.as_millis()
}

fn idle_in_transaction(ms: u128) -> String {
    format!("{ms}ms")
}

/// `application_name` is limited to 63 bytes by PostgreSQL.
fn application_name(replica_id: &str) -> String {
    let mut name = format!("invoice-reminder/{replica_id}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_name_fits_postgres_limit() {
        let long = "x".repeat(100);
        assert!(application_name(&long).len() <= 63);
        assert_eq!(application_name("a"), "invoice-reminder/a");
    }
}
