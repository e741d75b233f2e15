//! Every database call with a deadline, and the same calls through a
//! transaction pooler.
//!
//! PostgreSQL that stops answering (a dropped route, a frozen server) must
//! never hang a tick: a server-side `statement_timeout` cannot help when
//! the answers never arrive, and sqlx has no TCP keepalive. So each call
//! runs under `database.statement_timeout` on the client, and a connection
//! whose call timed out is closed, never returned to the pool (its protocol
//! state is unknown).
//!
//! Behind a transaction pooler (`database.pooler = "transaction"`, e.g.
//! PgBouncer's `pool_mode = transaction`), a session carries nothing from
//! one transaction to the next: statements are unnamed (not prepared once
//! and reused) and each call runs inside an explicit transaction, since
//! the pooler may switch server connections at any `Sync` outside one.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgQueryResult, PgRow};
use sqlx::{PgConnection, PgPool, Postgres};

use std::sync::Arc;

use super::params::Params;
use super::sql::Names;
use crate::config::{Pooler, Settings};

/// The pool and how calls on it are made. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Db {
    pool: PgPool,
    deadline: Duration,
    /// The setting `deadline` comes from, named when a call runs into it.
    deadline_key: &'static str,
    pooled: bool,
    /// How a transaction starts (see [`Db::begin_sql`]).
    begin: Arc<str>,
    names: Arc<Names>,
}

impl Db {
    pub fn new(pool: PgPool, settings: &Settings) -> Self {
        let names = Arc::new(Names::from_settings(settings));
        let settings = &settings.database;
        let pooled = settings.pooler == Pooler::Transaction;
        let begin = super::options::begin_statement(settings).into();
        Self {
            pool,
            deadline: settings.statement_timeout,
            deadline_key: "database.statement_timeout",
            pooled,
            begin,
            names,
        }
    }

    /// The same database through another pool (the names, the deadline and
    /// the source's shape learned by the start-up check are shared).
    pub fn with_pool(&self, pool: PgPool) -> Self {
        Self {
            pool,
            ..self.clone()
        }
    }

    /// For the operator's commands: every call under
    /// `database.command_timeout` instead (their statements read whole
    /// tables).
    pub fn for_commands(pool: PgPool, settings: &Settings) -> Self {
        Self {
            deadline: settings.database.command_timeout,
            deadline_key: "database.command_timeout",
            ..Self::new(pool, settings)
        }
    }

    /// A pool used as is: no pooler, a generous deadline, the default
    /// schema and source (tests, tools).
    pub fn plain(pool: PgPool) -> Self {
        Self {
            pool,
            deadline: Duration::from_secs(60),
            deadline_key: "the test deadline",
            pooled: false,
            begin: "BEGIN".into(),
            names: Arc::new(Names::defaults()),
        }
    }

    /// Our schema and the source relation.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// `template` with our schema and the source put in (see [`Names::sql`]).
    pub(crate) fn sql(&self, template: &str) -> sqlx::AssertSqlSafe<String> {
        self.names.sql(template)
    }

    /// `template`, whose parameters are named (`params`), with our schema
    /// and the source put in: ready to bind by name.
    pub(crate) fn statement(&self, template: &str) -> Prepared {
        let numbered = super::params::Numbered::new(&self.names.local(template));
        let sqlx::AssertSqlSafe(text) = self.names.sql(numbered.text());
        Prepared {
            text,
            numbered,
            persistent: self.named(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Whether statements may be prepared once per connection and reused.
    pub fn named(&self) -> bool {
        !self.pooled
    }

    /// Whether every call must run in a transaction (a transaction pooler).
    pub fn pooled(&self) -> bool {
        self.pooled
    }

    /// How a transaction starts. Behind a pooler the session's options
    /// (`jit`, `idle_in_transaction_session_timeout`) cannot be set at
    /// connect time, so they are set per transaction.
    pub(crate) fn begin_sql(&self) -> sqlx::AssertSqlSafe<String> {
        // Built from a number in `new`, never from input.
        sqlx::AssertSqlSafe(self.begin.to_string())
    }

    /// The error of a call that ran into this pool's deadline.
    pub(crate) fn timed_out(&self) -> sqlx::Error {
        timed_out(self.deadline, self.deadline_key)
    }

    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        self.pool.acquire().await
    }

    /// The result of a call that ran under the deadline; a call that timed
    /// out, or whose connection broke, closes its connection instead of
    /// returning it to the pool.
    pub(crate) fn settle<T, E: From<sqlx::Error> + Broken>(
        &self,
        mut conn: PoolConnection<Postgres>,
        outcome: Result<Result<T, E>, tokio::time::error::Elapsed>,
    ) -> Result<T, E> {
        match outcome {
            Ok(Err(e)) if e.broke_connection() => {
                conn.close_on_drop();
                Err(e)
            }
            Ok(result) => result,
            Err(_) => {
                conn.close_on_drop();
                Err(E::from(self.timed_out()))
            }
        }
    }
}

/// A statement with named parameters, ready for a call: it runs on a
/// connection with its parameters bound by name, prepared once per
/// connection unless behind a pooler (or [`Prepared::once`]).
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    text: String,
    numbered: super::params::Numbered,
    persistent: bool,
}

impl Prepared {
    /// Never prepared for reuse: a statement whose text changes per call
    /// or that runs rarely.
    pub fn once(mut self) -> Self {
        self.persistent = false;
        self
    }

    /// Every row of one call.
    pub async fn fetch_all<T>(
        &self,
        c: &mut PgConnection,
        params: &Params<'_>,
    ) -> Result<Vec<T>, sqlx::Error>
    where
        T: Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        sqlx::query_as_with(self.sql(), self.args(params)?)
            .persistent(self.persistent)
            .fetch_all(c)
            .await
    }

    /// The one row of a call that answers exactly one.
    pub async fn fetch_one<T>(
        &self,
        c: &mut PgConnection,
        params: &Params<'_>,
    ) -> Result<T, sqlx::Error>
    where
        T: Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        sqlx::query_as_with(self.sql(), self.args(params)?)
            .persistent(self.persistent)
            .fetch_one(c)
            .await
    }

    /// The one row of a call, if any.
    pub async fn fetch_optional<T>(
        &self,
        c: &mut PgConnection,
        params: &Params<'_>,
    ) -> Result<Option<T>, sqlx::Error>
    where
        T: Send + Unpin + for<'r> sqlx::FromRow<'r, PgRow>,
    {
        sqlx::query_as_with(self.sql(), self.args(params)?)
            .persistent(self.persistent)
            .fetch_optional(c)
            .await
    }

    /// The one value of a call that answers one row of one column.
    pub async fn fetch_scalar<T>(
        &self,
        c: &mut PgConnection,
        params: &Params<'_>,
    ) -> Result<T, sqlx::Error>
    where
        T: Send + Unpin + sqlx::Type<Postgres> + for<'r> sqlx::Decode<'r, Postgres>,
    {
        sqlx::query_scalar_with(self.sql(), self.args(params)?)
            .persistent(self.persistent)
            .fetch_one(c)
            .await
    }

    /// Runs a call that answers no rows.
    pub async fn execute(
        &self,
        c: &mut PgConnection,
        params: &Params<'_>,
    ) -> Result<PgQueryResult, sqlx::Error> {
        sqlx::query_with(self.sql(), self.args(params)?)
            .persistent(self.persistent)
            .execute(c)
            .await
    }

    /// The statement's text, for `sqlx::query*_with_result`.
    pub fn sql(&self) -> sqlx::AssertSqlSafe<String> {
        // Our own statement text with quoted identifiers from the settings.
        sqlx::AssertSqlSafe(self.text.clone())
    }

    /// The arguments of one call (an error if a name has no value).
    /// `$zones` is the zones both the database and the worker know
    /// (`db::zones`), unless the call gives its own.
    pub fn args(&self, params: &Params<'_>) -> Result<sqlx::postgres::PgArguments, sqlx::Error> {
        let zones = super::zones::json();
        self.numbered
            .bind(&params.or("zones", zones))
            .map_err(sqlx::Error::Encode)
    }
}

/// The error of a call that got no answer within `deadline`, naming the
/// setting (`key`) to raise.
pub fn timed_out(deadline: Duration, key: &str) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no answer from PostgreSQL within {key} ({}); if the statement is just slow, raise {key}",
            humantime::format_duration(deadline)
        ),
    ))
}

/// Errors that may say the connection a call ran on is broken.
pub trait Broken {
    /// The connection cannot be trusted for another call.
    fn broke_connection(&self) -> bool;
}

impl Broken for sqlx::Error {
    fn broke_connection(&self) -> bool {
        matches!(
            self,
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_)
        ) || matches!(self, sqlx::Error::Database(db)
            if db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57P")))
    }
}

/// True when the error says the database could not be reached or did not
/// answer (try again later), false when a statement itself failed (a
/// constraint, a trigger, a permission: retrying the same thing fails again).
pub fn is_unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exception; 57P01-03: shutdown, crash, cannot
            // connect now; 53: insufficient resources.
            code.starts_with("08") || code.starts_with("57P") || code.starts_with("53")
        }),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// PostgreSQL (or a PgBouncer in front of it) refused the login: invalid
/// password, no such role, pg_hba.
pub fn is_refused_login(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(d) = e else {
        return false;
    };
    match d.code().as_deref() {
        // PostgreSQL: invalid_password, invalid_authorization_specification.
        Some("28P01" | "28000") => true,
        // PgBouncer reports its own login failures as protocol_violation.
        Some("08P01") => {
            let m = d.message();
            m.contains("authentication failed") || m.contains("no such user")
        }
        _ => false,
    }
}

/// Runs `$body` (an expression of type `Result<T, E>` that uses `$conn`, a
/// `&mut PgConnection`) on one pooled connection under the deadline; in a
/// transaction when `tx` is given or a pooler sits in between.
macro_rules! on_db {
    ($db:expr, |$conn:ident| $body:expr) => {
        $crate::db::conn::on_db!(@run $db, false, |$conn| $body)
    };
    ($db:expr, tx, |$conn:ident| $body:expr) => {
        $crate::db::conn::on_db!(@run $db, true, |$conn| $body)
    };
    (@run $db:expr, $tx:expr, |$conn:ident| $body:expr) => {{
        let db: &$crate::db::Db = $db;
        let mut pooled = db.acquire().await?;
        let in_tx = $tx || db.pooled();
        let outcome = tokio::time::timeout(db.deadline(), async {
            if in_tx {
                let mut tx = sqlx::Connection::begin_with(&mut *pooled, db.begin_sql()).await?;
                let value = {
                    let $conn: &mut sqlx::PgConnection = &mut *tx;
                    $body
                }?;
                tx.commit().await?;
                Ok(value)
            } else {
                let $conn: &mut sqlx::PgConnection = &mut *pooled;
                $body
            }
        })
        .await;
        db.settle(pooled, outcome)
    }};
}
pub(crate) use on_db;
