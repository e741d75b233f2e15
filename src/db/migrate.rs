//! `migrate`: our schema and everything in it, nothing outside it.
//!
//! Every migration runs on one connection whose `search_path` is
//! `database.schema` alone, and sqlx's migrations table is
//! `"<schema>"._sqlx_migrations`, so the migration files name no schema and
//! the same files install into any schema. An install from before the
//! schema existed (any earlier version: its migrations table records our
//! first migration but not `..._own_schema_and_source.sql`) has everything
//! in `public`: its migrations table and then its objects are moved into
//! the schema before any migration runs, so the pending ones, whichever
//! they are, find their tables (see `adopt_earlier_install`).
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

/// The version of `..._own_schema_and_source.sql`: an install whose
/// migrations table lacks it made its objects in `public`.
const OWN_SCHEMA_MIGRATION: i64 = 20261130000005;

/// The tables our first migration creates.
const FIRST_MIGRATION_TABLES: [&str; 4] = ["customers", "invoices", "job_runs", "reminders"];

/// What the migrations before [`OWN_SCHEMA_MIGRATION`] create (the
/// sequences of serial columns, indexes and constraints move with their
/// tables).
const EARLIER_OBJECTS: [(&str, Kind); 7] = [
    ("customers", Kind::Table),
    ("invoices", Kind::Table),
    ("job_runs", Kind::Table),
    ("reminders", Kind::Table),
    ("lock_fences", Kind::Table),
    ("lock_fence_seq", Kind::Sequence),
    ("invoice_reminder_clock", Kind::Function),
];

#[derive(Clone, Copy)]
enum Kind {
    Table,
    Sequence,
    Function,
}

impl Kind {
    fn keyword(self) -> &'static str {
        match self {
            Self::Table => "TABLE",
            Self::Sequence => "SEQUENCE",
            Self::Function => "FUNCTION",
        }
    }

    /// What follows the name in `ALTER FUNCTION name() ...`.
    fn suffix(self) -> &'static str {
        match self {
            Self::Function => "()",
            Self::Table | Self::Sequence => "",
        }
    }

    /// Whether `public.$2` exists and `"$1".$2` does not.
    fn movable(self) -> &'static str {
        match self {
            Self::Function => {
                "SELECT to_regprocedure(format('public.%I()', $2::text)) IS NOT NULL
                    AND to_regprocedure(format('%I.%I()', $1::text, $2::text)) IS NULL"
            }
            Self::Table | Self::Sequence => {
                "SELECT to_regclass(format('public.%I', $2::text)) IS NOT NULL
                    AND to_regclass(format('%I.%I', $1::text, $2::text)) IS NULL"
            }
        }
    }
}

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
        adopt_earlier_install(conn, schema).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("SET search_path TO {quoted}")))
            .execute(&mut *conn)
            .await?;
        let mut migrator = Migrator::with_migrations(MIGRATOR.iter().map(as_installed).collect());
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

/// Adopts an install made by a version that kept everything in `public`
/// (before migration `..._own_schema_and_source.sql`), in one transaction:
/// its migrations table and then its tables, sequence and clock function
/// move into `schema`, so every pending migration finds them there. The
/// migrations before that one name their tables unqualified and run with
/// `search_path` = the schema alone: left in `public`, the tables were not
/// found ("relation customers does not exist"). This also repairs an
/// install that an earlier `migrate` left half-moved (migrations table in
/// the schema, tables in `public`).
async fn adopt_earlier_install(
    conn: &mut PgConnection,
    schema: &SqlName,
) -> Result<(), MigrateError> {
    if schema.as_str() == "public" {
        return Ok(());
    }
    let mut tx = conn.begin().await?;
    let moved_table = adopt_migrations_table(&mut tx, schema).await?;
    let moved = adopt_objects(&mut tx, schema).await?;
    tx.commit().await?;
    if moved_table || !moved.is_empty() {
        tracing::info!(
            schema = %schema,
            moved = %moved.join(", "),
            "moved an earlier install from public into the schema"
        );
    }
    Ok(())
}

/// Moves `public._sqlx_migrations` into `schema` when it is ours (it
/// records our first migration) and the schema has none yet.
async fn adopt_migrations_table(
    tx: &mut PgConnection,
    schema: &SqlName,
) -> Result<bool, MigrateError> {
    let candidate: bool = sqlx::query_scalar(
        "SELECT to_regclass('public._sqlx_migrations') IS NOT NULL
            AND to_regclass(format('%I._sqlx_migrations', $1::text)) IS NULL",
    )
    .bind(schema.as_str())
    .fetch_one(&mut *tx)
    .await?;
    if !candidate {
        return Ok(false);
    }
    let ours: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM public._sqlx_migrations WHERE version = $1)",
    )
    .bind(FIRST_MIGRATION)
    .fetch_one(&mut *tx)
    .await?;
    if ours {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE public._sqlx_migrations SET SCHEMA {}",
            schema.quoted()
        )))
        .execute(&mut *tx)
        .await?;
    }
    Ok(ours)
}

/// Moves our objects from `public` into `schema` when the schema's
/// migrations table says they were made there: it records our first
/// migration but not [`OWN_SCHEMA_MIGRATION`], and the schema holds none
/// of the first migration's tables (a fresh install in the schema that
/// stopped half-way has them there, and then a `public` table of the same
/// name is the user's own). Each object moves only if the schema has none
/// of that name. Returns the names moved.
async fn adopt_objects(
    tx: &mut PgConnection,
    schema: &SqlName,
) -> Result<Vec<&'static str>, MigrateError> {
    let recorded: (bool, bool) = if table_exists(tx, schema, "_sqlx_migrations").await? {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT COALESCE(bool_or(version = $1), false), COALESCE(bool_or(version = $2), false)
               FROM {}._sqlx_migrations",
            schema.quoted()
        )))
        .bind(FIRST_MIGRATION)
        .bind(OWN_SCHEMA_MIGRATION)
        .fetch_one(&mut *tx)
        .await?
    } else {
        (false, false)
    };
    if recorded != (true, false) {
        return Ok(Vec::new());
    }
    for table in FIRST_MIGRATION_TABLES {
        if table_exists(tx, schema, table).await? {
            return Ok(Vec::new());
        }
    }
    let quoted = schema.quoted();
    let mut moved = Vec::new();
    for (name, kind) in EARLIER_OBJECTS {
        let movable: bool = sqlx::query_scalar(kind.movable())
            .bind(schema.as_str())
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        if movable {
            // Only fixed names and the quoted schema go in.
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER {} public.{name}{} SET SCHEMA {quoted}",
                kind.keyword(),
                kind.suffix()
            )))
            .execute(&mut *tx)
            .await?;
            moved.push(name);
        }
    }
    Ok(moved)
}

async fn table_exists(
    conn: &mut PgConnection,
    schema: &SqlName,
    table: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL")
        .bind(schema.as_str())
        .bind(table)
        .fetch_one(&mut *conn)
        .await
}

/// Migrations whose comments were reworded after they shipped, with the
/// checksum installs recorded when they applied them (SHA-384 of the text
/// as it was). The SQL is unchanged; without this, every install would
/// refuse to start with "migration was previously applied but has been
/// modified".
const REWORDED: &[(i64, [u8; 48])] = &[(
    20261130000008,
    [
        64, 14, 227, 159, 196, 39, 146, 68, 102, 143, 230, 119, 12, 212, 140, 98, 191, 172, 28,
        208, 71, 15, 255, 209, 141, 123, 84, 20, 46, 164, 118, 201, 235, 255, 2, 89, 114, 254, 192,
        210, 200, 130, 251, 236, 101, 126, 32, 202,
    ],
)];

/// `migration` with the checksum installs recorded for it.
fn as_installed(migration: &sqlx::migrate::Migration) -> sqlx::migrate::Migration {
    let mut migration = migration.clone();
    if let Some((_, checksum)) = REWORDED.iter().find(|(v, _)| *v == migration.version) {
        migration.checksum = std::borrow::Cow::Owned(checksum.to_vec());
    }
    migration
}
