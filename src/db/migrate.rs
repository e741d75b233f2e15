//! `migrate`: our schema and everything in it, nothing outside it.
//!
//! Every migration runs on one connection whose `search_path` is
//! `database.schema` alone, and sqlx's migrations table is
//! `"<schema>"._sqlx_migrations`, so the migration files name no schema and
//! the same files install into any schema. An install from before the
//! schema existed has its migrations table in `public`: it is moved into
//! the schema first (only when it records our first migration), and the
//! migration `..._own_schema_and_source.sql` moves the tables after it.
//! Concurrent `migrate`s (several replicas starting) take turns on an
//! advisory lock.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{Connection, PgConnection, PgPool};

use super::MIGRATOR;
use crate::config::SqlName;

/// The advisory lock id concurrent `migrate`s queue on (`hashtext` of
/// `invoice-reminder migrate`, fixed so every version agrees).
const MIGRATE_LOCK_ID: i64 = 0x1e7a_5c0f_d3b2_9a41;

/// The version of our first migration: its presence in a migrations table
/// says the table is ours.
const FIRST_MIGRATION: i64 = 20261130000001;

/// Applies pending migrations into `schema`, creating it if needed.
pub async fn migrate(pool: &PgPool, schema: &SqlName) -> Result<(), MigrateError> {
    let mut conn = pool.acquire().await?;
    let result = run(&mut conn, schema).await;
    // The session's search_path was changed: never hand it back to the pool.
    conn.close_on_drop();
    result
}

async fn run(conn: &mut PgConnection, schema: &SqlName) -> Result<(), MigrateError> {
    let quoted = schema.quoted();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATE_LOCK_ID)
        .execute(&mut *conn)
        .await?;
    let result = async {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {quoted}"
        )))
        .execute(&mut *conn)
        .await?;
        adopt_public_migrations_table(conn, schema).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("SET search_path TO {quoted}")))
            .execute(&mut *conn)
            .await?;
        let mut migrator = Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
        migrator.dangerous_set_table_name(format!("{quoted}._sqlx_migrations"));
        migrator.run(&mut *conn).await
    }
    .await;
    let _ = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATE_LOCK_ID)
        .execute(&mut *conn)
        .await;
    result
}

/// Moves `public._sqlx_migrations` into `schema` when it is ours (it
/// records our first migration) and the schema has none yet: an upgrade
/// from a version that installed into `public`.
async fn adopt_public_migrations_table(
    conn: &mut PgConnection,
    schema: &SqlName,
) -> Result<(), MigrateError> {
    let ours: bool = sqlx::query_scalar(
        "SELECT to_regclass('public._sqlx_migrations') IS NOT NULL
            AND to_regclass(format('%I._sqlx_migrations', $1::text)) IS NULL",
    )
    .bind(schema.as_str())
    .fetch_one(&mut *conn)
    .await?;
    if !ours || schema.as_str() == "public" {
        return Ok(());
    }
    let recorded: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM public._sqlx_migrations WHERE version = $1)",
    )
    .bind(FIRST_MIGRATION)
    .fetch_one(&mut *conn)
    .await?;
    if recorded {
        let mut tx = conn.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE public._sqlx_migrations SET SCHEMA {}",
            schema.quoted()
        )))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(schema = %schema, "moved the migrations table of an earlier install from public into the schema");
    }
    Ok(())
}
