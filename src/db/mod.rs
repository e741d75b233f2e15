//! All SQL lives here: one file per table or concern, plain functions over
//! a `PgPool`, runtime-checked queries (`query_as` + `FromRow`) so neither a
//! build nor the Docker image needs a database or a `.sqlx` cache.
//!
//! The claim protocol (`reminders`) is the heart of the project; read its
//! module docs first.

pub mod audit;
pub mod invoices;
pub mod locks;
pub mod reminders;
pub mod runs;
pub mod seed;

use chrono::NaiveDate;
use chrono_tz::Tz;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::Settings;

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
        .connect_with(settings.pg_connect_options())
        .await
}

/// Connects on first use: the daemon starts (and keeps scheduling) while
/// PostgreSQL is down, and each tick reports the failure on its own.
pub fn connect_lazy(settings: &Settings) -> PgPool {
    pool_options(settings).connect_lazy_with(settings.pg_connect_options())
}

/// Applies pending migrations. Safe to run from several replicas at once:
/// sqlx serialises them with an advisory lock.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// One round trip: the database answers.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}

/// Today's date by the DATABASE clock in `tz`: the one clock every replica
/// shares, so they agree on the period even when their own clocks drift.
pub async fn today(pool: &PgPool, tz: Tz) -> Result<NaiveDate, sqlx::Error> {
    sqlx::query_scalar("SELECT (now() AT TIME ZONE $1)::date")
        .bind(tz.name())
        .fetch_one(pool)
        .await
}
