//! All SQL lives here: one file per table or concern, plain functions over
//! a [`Db`] (the pool, with a deadline on every call: `conn`), runtime-
//! checked queries (`query_as` + `FromRow`) so neither a build nor the
//! Docker image needs a database or a `.sqlx` cache.
//!
//! The claim protocol (`reminders`) is the heart of the project; read its
//! module docs first.

pub mod activity;
pub mod archive;
pub mod audit;
pub mod claims;
pub mod conn;
pub mod customers;
pub mod deliveries;
pub mod explain;
pub mod invoices;
pub mod locks;
pub mod migrate;
pub mod options;
pub mod overview;
pub mod owed;
pub mod owing;
pub mod params;
pub mod pauses;
pub mod payment_links;
pub mod payments;
pub mod relay_pace;
pub mod reminders;
pub mod returned;
pub mod runs;
pub mod search;
pub mod seed;
pub mod sessions;
pub mod settle;
pub mod source;
pub mod source_row;
pub mod sql;
pub mod stats;
pub mod suppressions;
pub mod uncommitted;
pub mod zones;

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::Settings;
pub use conn::Db;
use conn::on_db;

/// Migrations are embedded in the binary; no files are needed at run time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

fn pool_options(settings: &Settings) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(settings.database.max_connections)
        .acquire_timeout(settings.database.connect_timeout)
}

/// Connects now, so commands fail fast with the real cause
/// (refused, unknown database, ...).
pub async fn connect(settings: &Settings) -> Result<PgPool, sqlx::Error> {
    pool_options(settings)
        .connect_with(connect_options(settings))
        .await
}

/// Connects on first use: the daemon starts (and keeps scheduling) while
/// PostgreSQL is down, and each tick reports the failure on its own.
pub fn connect_lazy(settings: &Settings) -> PgPool {
    pool_options(settings).connect_lazy_with(connect_options(settings))
}

/// The settings' connect options, with sqlx's slow-statement report at
/// debug level: at its default (warn) it printed whole statements, dozens
/// of lines each, into the operator's log whenever a command read a large
/// table. Our own errors say what was being done and which deadline ran
/// out.
fn connect_options(settings: &Settings) -> sqlx::postgres::PgConnectOptions {
    use sqlx::ConnectOptions as _;
    options::connect_options(settings)
        .log_slow_statements(log::LevelFilter::Debug, std::time::Duration::from_secs(1))
}

/// A connection of their own (a pool of one, connected on first use) for
/// the tick's two busiest phases, the claimer and the marker (which also
/// writes the results), and for the reads of the holds before a letter
/// that waited goes (`checks`: opened only when a letter waits). Their
/// statements are then prepared once per process, not once per pooled
/// connection (each first use of a statement on a connection is a
/// transaction of its own), and a mark never queues behind the other
/// phases for a connection. No ping before each use (it
/// was a round trip per mark): a connection that breaks is closed by the
/// call that found it broken (`conn::Db::settle`), and the next call opens
/// a new one.
///
/// The marker's and the checks' connections run nothing but statements
/// that find their rows by primary key (`deliveries`), so on a direct
/// connection each is opened with `enable_seqscan = off`: on a small table PostgreSQL would rather read
/// the whole of `reminders` than probe its key a few hundred times, a cost
/// per reminder that depends on how many reminders the table already
/// holds (BENCHMARKS.md, "Lookups that read a bounded number of rows").
/// Behind a transaction pooler no startup option can be set.
#[derive(Clone, Debug)]
pub struct PhaseDbs {
    pub claims: Db,
    pub marks: Db,
    pub checks: Db,
}

impl PhaseDbs {
    /// Three pools of one connection each, beside `db`: to the same server
    /// with the same options as its pool, sharing its names and source
    /// shape.
    pub fn new(settings: &Settings, db: &Db) -> Self {
        let options = (*db.pool().connect_options()).clone();
        let one = |options: sqlx::postgres::PgConnectOptions| {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(settings.database.connect_timeout)
                .test_before_acquire(false)
                .connect_lazy_with(options);
            db.with_pool(pool)
        };
        let by_key = match db.pooled() {
            true => options.clone(),
            false => options.clone().options([
                ("enable_seqscan", "off"),
                ("plan_cache_mode", "force_generic_plan"),
            ]),
        };
        Self {
            claims: one(options),
            marks: one(by_key.clone()),
            checks: one(by_key),
        }
    }

    /// Closes the three connections.
    pub async fn close(&self) {
        for db in [&self.claims, &self.marks, &self.checks] {
            db.pool().close().await;
        }
    }
}

/// Applies pending migrations into `database.schema` (see [`migrate`]).
/// Safe to run from several replicas at once: they take turns.
pub async fn migrate(
    pool: &PgPool,
    schema: &crate::config::SqlName,
) -> Result<(), sqlx::migrate::MigrateError> {
    migrate::migrate(pool, schema).await
}

/// One round trip: the database answers.
pub async fn ping(db: &Db) -> Result<(), sqlx::Error> {
    on_db!(db, |c| sqlx::query("SELECT 1")
        .persistent(db.named())
        .execute(&mut *c)
        .await
        .map(|_| ()))
}

/// The database clock: its "now" and its date in `tz`. It is the one clock
/// every replica shares, so they agree on "today" even when their own clocks
/// drift. Read through `invoice_reminder_clock()` (a migration defines it
/// as `now()`) so tests can move it.
pub async fn clock(db: &Db, tz: Tz) -> Result<(DateTime<Utc>, NaiveDate), sqlx::Error> {
    on_db!(db, |c| {
        sqlx::query_as(db.sql(
        "SELECT {ir}.invoice_reminder_clock(), ({ir}.invoice_reminder_clock() AT TIME ZONE $1)::date"
    ))
    .persistent(db.named())
    .bind(tz.name())
    .fetch_one(&mut *c)
    .await
    })
}

/// Today's date by the database clock in `tz`.
pub async fn today(db: &Db, tz: Tz) -> Result<NaiveDate, sqlx::Error> {
    clock(db, tz).await.map(|(_, today)| today)
}
