//! Why a tick ended early, and which of those reasons only a change of
//! configuration can cure ([`TickError::configuration_problem`]: `run`
//! exits 2 with that line instead of retrying every tick).

use crate::lock::LockError;

/// Errors that end a tick early. The lock is released in every case.
#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("database error while {doing}: {}", describe_db_error(source))]
    Database {
        doing: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// `source.relation` does not satisfy the source contract.
    #[error("{0}")]
    Source(String),
    /// A phase of the tick ended abnormally (a bug): the tick stopped, its
    /// unsent rows are handed back.
    #[error("a phase of the tick failed: {0}")]
    Stage(String),
}

impl TickError {
    /// Credentials or permissions refused: retrying cannot help, the
    /// configuration must change. The message names the key.
    pub fn configuration_problem(&self) -> Option<String> {
        match self {
            Self::Lock(e) if e.is_configuration() => Some(e.to_string()),
            Self::Source(problem) => Some(problem.clone()),
            Self::Database { source, .. } if crate::db::conn::is_refused_login(source) => {
                Some(format!(
                    "database.url: PostgreSQL refused the login ({}); check the user and password in database.url",
                    crate::causes::Causes(source)
                ))
            }
            _ => None,
        }
    }
}

/// sqlx's pool timeout hides its cause; say what it usually means. Other
/// errors as `causes` shows them: PostgreSQL's message once, without its
/// source line.
fn describe_db_error(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::PoolTimedOut => {
            "no connection to PostgreSQL within database.connect_timeout (is it reachable?)"
                .to_owned()
        }
        other => crate::causes::shown(other),
    }
}

pub(crate) fn db_err(doing: &'static str) -> impl FnOnce(sqlx::Error) -> TickError {
    move |source| TickError::Database { doing, source }
}
