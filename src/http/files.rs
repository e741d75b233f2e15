//! The open files a `run` process may need, checked against its limit
//! (`ulimit -n`) before it starts: every listener full
//! (`http.max_connections` each, and the listening socket), the database
//! pool and the phases' own connections, the SMTP pool, and a reserve for
//! the rest (Redis, the runtime, logs, name lookups). A soft limit below
//! that is raised up to the hard limit; a hard limit below it stops
//! start-up naming `http.max_connections`, so a listener can never take
//! the descriptors the ticks need.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::config::Settings;

/// Descriptors besides connections: Redis, the lock, the runtime's own,
/// standard streams and log files, DNS, a PostgreSQL lock connection.
const RESERVED: u64 = 32;

/// The database connections the phases hold beside the pool (claims,
/// marks, results).
const STAGE_CONNECTIONS: u64 = 3;

/// How many descriptors `settings` may need at most.
pub fn needed(settings: &Settings) -> u64 {
    let http = &settings.http;
    let listeners = u64::from(http.listen.is_some())
        + u64::from(http.webhook_listen.is_some() && http.webhook_enabled());
    let per_listener = u64::from(http.max_connections).saturating_add(2);
    listeners
        .saturating_mul(per_listener)
        .saturating_add(u64::from(settings.database.max_connections))
        .saturating_add(STAGE_CONNECTIONS)
        .saturating_add(u64::from(settings.smtp.pool_size))
        .saturating_add(RESERVED)
}

/// Makes sure the process may open [`needed`] files: raises the soft
/// limit if it is lower (and the hard limit allows it); Err with the
/// sentence for the operator when the hard limit is lower.
pub fn ensure_open_files(settings: &Settings) -> Result<(), String> {
    if settings.http.listen.is_none() && settings.http.webhook_listen.is_none() {
        return Ok(());
    }
    let needed = needed(settings);
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        // No limit to read: nothing to check against.
        return Ok(());
    };
    if soft >= needed {
        return Ok(());
    }
    if hard >= needed && setrlimit(Resource::RLIMIT_NOFILE, needed, hard).is_ok() {
        tracing::info!(
            from = soft,
            to = needed,
            "raised the open-file limit (ulimit -n) to what the listener and the pools may need"
        );
        return Ok(());
    }
    Err(format!(
        "http.max_connections = {} with database.max_connections = {} and smtp.pool_size = {} may need {needed} open files, but the limit (ulimit -n) is {hard}: lower http.max_connections or raise the limit",
        settings.http.max_connections, settings.database.max_connections, settings.smtp.pool_size
    ))
}
