//! Upgrading an install made by an earlier version: `migrate` works from
//! every schema that ever landed, and no delivery the earlier version left
//! unknown is sent again; each stays listed by `audit` for `resolve`.
//!
//! Each fixture in tests/fixtures/upgrade/ is what that commit's own binary
//! left in its database (tests/fixtures/upgrade/make.sh): seeded demo data,
//! three reminders sent, three left `sending` by a run that finished (the
//! server hung up after the message: delivery unknown), and three left
//! `sending` by a run killed mid-send. Every fixture was made on 2026-12-01;
//! the tests put the database clock back to that day, so the due steps are
//! the ones the earlier version saw.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, PgPool};

use crate::common::{self, TestDb, World, cli};

/// An install made by one earlier commit, as its fixture records it.
struct Install {
    rev: &'static str,
    /// Reminder ids whose delivery the earlier version left unknown.
    unknown: &'static [i64],
    /// Reminder ids its killed run claimed but provably never started
    /// (`started_at` NULL in a version that recorded it): returned, and
    /// sent once.
    never_started: &'static [i64],
    /// Reminders keyed by step (`overdue`), not by date: from migration
    /// 20261130000003 on.
    step_keys: bool,
}

/// Migration 20261130000001 only (the first landed schema).
const MIGRATION_1: Install = Install {
    rev: "19ee5c7",
    unknown: &[4, 5, 6, 7, 8, 9],
    never_started: &[],
    step_keys: false,
};
/// Migrations 1-2: fencing.
const MIGRATIONS_1_2: Install = Install {
    rev: "0ec0ae5",
    unknown: &[4, 5, 6, 7, 8, 9],
    never_started: &[],
    step_keys: false,
};
/// Migrations 1-3: stages.
const MIGRATIONS_1_3: Install = Install {
    rev: "b1aa6dd",
    unknown: &[4, 5, 6, 7, 8, 9],
    never_started: &[],
    step_keys: true,
};
/// Migrations 1-4: started marks and leases, tables still in public.
const MIGRATIONS_1_4: Install = Install {
    rev: "4ef463d",
    unknown: &[4, 5, 6, 7],
    never_started: &[8, 9],
    step_keys: true,
};
/// Migrations 1-5: our own schema.
const MIGRATIONS_1_5: Install = Install {
    rev: "c89c06e",
    unknown: &[4, 5, 6, 7],
    never_started: &[8, 9],
    step_keys: true,
};

/// A database holding what `rev`'s binary left (nothing migrated since).
async fn database_made_by(rev: &str) -> TestDb {
    let db = TestDb::create_empty().await;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upgrade")
        .join(format!("{rev}.sql"));
    let dump = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    // The dump sets its session's search_path: a connection of its own.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(dump))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("loading {path:?}: {e}"));
    conn.close().await.unwrap();
    db
}

fn succeeded(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}{}",
        out.status,
        common::stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn public_relations(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Puts the database clock (the worker's "today") a minute after the
/// fixture's last run: the day the earlier version last worked.
async fn clock_back_to_the_fixture(pool: &PgPool) {
    let last: DateTime<Utc> = sqlx::query_scalar(
        "SELECT max(started_at) + interval '1 minute' FROM invoice_reminder.job_runs",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE OR REPLACE FUNCTION invoice_reminder.invoice_reminder_clock() RETURNS timestamptz
             LANGUAGE sql STABLE AS $$ SELECT timestamptz '{}' $$",
        last.to_rfc3339()
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// A new invoice, 10 days overdue on the fixture's day: owes `overdue`.
async fn insert_new_overdue_invoice(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO invoice_reminder.invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT 1, 'NEW-1', 5000, 'EUR', (invoice_reminder.invoice_reminder_clock() AT TIME ZONE 'UTC')::date - 10
         RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn invoices_of(pool: &PgPool, reminders: &[i64]) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT invoice_id::bigint FROM invoice_reminder.reminders WHERE id = ANY($1) ORDER BY 1",
    )
    .bind(reminders)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn unknown_in_audit(world: &World) -> Vec<i64> {
    let out = cli(world, &["audit", "--json", "--unknown-after", "36500days"]).await;
    succeeded("audit", &out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<i64> = report["unknown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["reminder_id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

async fn status_of(pool: &PgPool, reminder: i64) -> String {
    sqlx::query_scalar("SELECT status FROM invoice_reminder.reminders WHERE id = $1")
        .bind(reminder)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Upgrades `install` and checks everything the upgrade promises.
async fn upgrade(install: &Install) {
    let world = World::on(database_made_by(install.rev).await).await;

    let migrated = cli(&world, &["migrate"]).await;
    let again = cli(&world, &["migrate"]).await;

    succeeded("migrate", &migrated);
    succeeded("migrate again", &again);
    let pool = world.pool();
    assert_eq!(
        public_relations(pool).await,
        Vec::<String>::new(),
        "everything moved into the schema"
    );
    let versions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM invoice_reminder._sqlx_migrations")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(
        versions,
        invoice_reminder::db::MIGRATOR.iter().count() as i64
    );
    let unstarted: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM invoice_reminder.reminders
          WHERE status = 'sending' AND started_at IS NULL ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        unstarted, install.never_started,
        "only rows known never to have started are unstarted"
    );

    clock_back_to_the_fixture(pool).await;
    let new = insert_new_overdue_invoice(pool).await;
    let mut expected = invoices_of(pool, install.never_started).await;
    expected.push(new);
    expected.sort_unstable();
    succeeded("check-source", &cli(&world, &["check-source"]).await);
    succeeded("run-once", &cli(&world, &["run-once"]).await);
    succeeded("run-once again", &cli(&world, &["run-once"]).await);

    let mut mailed = world.sink.invoice_ids();
    mailed.sort_unstable();
    assert_eq!(
        mailed, expected,
        "the new invoice and the never-started claims, once each; nothing the earlier version sent or may have sent"
    );
    assert_eq!(unknown_in_audit(&world).await, install.unknown);

    // Row 7 was left by the killed run, row 5 by the run that finished.
    let sent = cli(&world, &["resolve", "--sent", "7"]).await;
    let resend = cli(&world, &["resolve", "--resend", "5"]).await;
    succeeded("run-once after resolve", &cli(&world, &["run-once"]).await);

    succeeded("resolve --sent", &sent);
    assert_eq!(status_of(pool, 7).await, "sent");
    if install.step_keys {
        succeeded("resolve --resend", &resend);
        let (invoice, step): (String, String) = sqlx::query_as(
            "SELECT invoice_id, period FROM invoice_reminder.reminders WHERE id = 5",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        let received = world.sink.received();
        let last = received.last().unwrap();
        assert_eq!(received.len(), expected.len() + 1, "the one resent");
        assert_eq!(
            last.header("Message-ID").map(str::trim),
            Some(format!("<invoice-{invoice}.{step}@invoice-reminder.example.com>").as_str())
        );
        assert_eq!(status_of(pool, 5).await, "sent");
    } else {
        // A date key is no step: `resolve` knows the row is unknown, and
        // refuses to resend what is no longer due.
        assert_eq!(resend.status.code(), Some(1));
        let said = common::stdout(&resend);
        assert!(said.contains("is no longer due"), "{said}");
        assert_eq!(world.sink.count(), expected.len());
    }
}

#[tokio::test]
async fn an_install_of_the_first_schema_upgrades_and_sends_nothing_it_left_unknown() {
    upgrade(&MIGRATION_1).await;
}

#[tokio::test]
async fn an_install_made_by_0ec0ae5_upgrades_and_sends_nothing_it_left_unknown() {
    upgrade(&MIGRATIONS_1_2).await;
}

#[tokio::test]
async fn an_install_made_by_b1aa6dd_upgrades_and_sends_nothing_it_left_unknown() {
    upgrade(&MIGRATIONS_1_3).await;
}

#[tokio::test]
async fn an_install_with_started_marks_in_public_upgrades_and_returns_only_what_never_started() {
    upgrade(&MIGRATIONS_1_4).await;
}

#[tokio::test]
async fn an_install_in_its_own_schema_upgrades_and_returns_only_what_never_started() {
    upgrade(&MIGRATIONS_1_5).await;
}

#[tokio::test]
async fn an_install_a_failed_migrate_left_half_moved_upgrades() {
    let db = database_made_by("0ec0ae5").await;
    // What `migrate` of c89c06e did before failing at migration 3: the
    // migrations table moved into the schema, the tables left in public.
    sqlx::raw_sql(
        "CREATE SCHEMA invoice_reminder;
         ALTER TABLE public._sqlx_migrations SET SCHEMA invoice_reminder;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let world = World::on(db).await;

    let migrated = cli(&world, &["migrate"]).await;

    succeeded("migrate", &migrated);
    assert_eq!(public_relations(world.pool()).await, Vec::<String>::new());
    assert_eq!(unknown_in_audit(&world).await, MIGRATIONS_1_2.unknown);
}

#[tokio::test]
async fn an_unknown_row_whose_run_was_pruned_is_still_listed_and_can_be_resolved() {
    let db = database_made_by("b1aa6dd").await;
    // An operator pruned old job_runs (the foreign key makes them clear
    // run_id first).
    sqlx::raw_sql(
        "UPDATE public.reminders SET run_id = NULL WHERE run_id = 3;
         DELETE FROM public.job_runs WHERE id = 3;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let world = World::on(db).await;

    succeeded("migrate", &cli(&world, &["migrate"]).await);
    clock_back_to_the_fixture(world.pool()).await;
    succeeded("run-once", &cli(&world, &["run-once"]).await);
    let listed = unknown_in_audit(&world).await;
    let sent = cli(&world, &["resolve", "--sent", "8"]).await;

    assert_eq!(world.sink.count(), 0, "nothing sent again");
    assert_eq!(listed, MIGRATIONS_1_3.unknown);
    succeeded("resolve --sent", &sent);
    assert_eq!(status_of(world.pool(), 8).await, "sent");
}

/// A migration whose comments were reworded after it shipped keeps the
/// checksum installs recorded for it (the SHA-384 of its text as shipped),
/// so an install made before the rewording still starts.
#[tokio::test]
async fn a_reworded_migration_keeps_the_checksum_installs_recorded() {
    let world = World::new().await;

    let recorded: String = sqlx::query_scalar(
        "SELECT encode(checksum, 'hex') FROM invoice_reminder._sqlx_migrations
          WHERE version = 20261130000008",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();

    assert_eq!(
        recorded,
        "400ee39fc4279244668fe6770cd48c62bfac1cd0470fffd18d7b54142ea476c9\
         ebff025972fec0d2c882fbec657e20ca"
    );
}
