//! Test helpers shared by the test binaries: each test gets its own
//! database (random name, migrated, dropped afterwards), its own Redis key
//! prefix (keys deleted afterwards) and its own SMTP sink.
//!
//! PostgreSQL and Redis default to 127.0.0.1:5432 and :6379; override with
//! `TEST_POSTGRES_URL` (an admin URL, e.g. `postgres://postgres@host/postgres`)
//! and `TEST_REDIS_URL`.
#![allow(dead_code)]

pub mod backend;
pub mod billing;
pub mod closed_port;
pub mod pgbouncer;
pub mod postfix;
pub mod proxy;
pub mod relay;
pub mod smtp;
pub mod stripe_api;

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use invoice_reminder::config::{ConfigSource, Settings};
use invoice_reminder::tick::context::Context;
use invoice_reminder::tick::{TickError, TickOutcome, run_tick};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use backend::Backend;
pub use smtp::{Mode as SmtpMode, SmtpSink};

pub fn postgres_admin_url() -> String {
    std::env::var("TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// `postgres://.../postgres` with the database name replaced.
fn url_for_database(admin: &str, name: &str) -> String {
    let (base, _) = admin
        .rsplit_once('/')
        .expect("TEST_POSTGRES_URL must end in /dbname");
    format!("{base}/{name}")
}

/// A fresh, migrated database, dropped when this value is dropped.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl TestDb {
    pub async fn create() -> Self {
        let db = Self::create_empty().await;
        let schema = invoice_reminder::config::SqlName::parse("invoice_reminder").expect("schema");
        invoice_reminder::db::migrate(&db.pool, &schema)
            .await
            .expect("migrate test database");
        db
    }

    /// A new database with nothing in it (not migrated).
    pub async fn create_empty() -> Self {
        let admin = postgres_admin_url();
        let name = format!("ir_test_{}", Uuid::new_v4().simple());
        let admin_pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin)
            .await
            .expect("connect to PostgreSQL (is it running? see README)");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin_pool)
            .await
            .expect("create test database");
        admin_pool.close().await;
        let url = url_for_database(&admin, &name);
        // The tests' own SQL names our tables unqualified; the worker's
        // never does (it is given the plain URL).
        let options = url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .expect("test database URL")
            .options([("search_path", "invoice_reminder,public")]);
        let pool = PgPoolOptions::new()
            .max_connections(5)
            .connect_with(options)
            .await
            .expect("connect to test database");
        Self { name, url, pool }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin = postgres_admin_url();
        // Dropping needs async I/O; do it on a runtime of its own so it works
        // whether or not the test's runtime is still alive.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(pool) = PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&admin)
                    .await
                {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&pool)
                    .await;
                    pool.close().await;
                }
            });
        })
        .join();
    }
}

/// A Redis key prefix of its own; its keys are deleted on drop.
pub struct RedisPrefix {
    pub prefix: String,
}

impl RedisPrefix {
    pub fn new() -> Self {
        Self {
            prefix: format!("ir-test:{}:", Uuid::new_v4().simple()),
        }
    }

    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(redis_url()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
    }
}

/// Everything one test needs, isolated from every other test.
pub struct World {
    pub db: TestDb,
    pub redis: RedisPrefix,
    pub sink: SmtpSink,
    /// Overrides applied on top of the test defaults, as env variables.
    pub overrides: Vec<(String, String)>,
}

impl World {
    pub async fn new() -> Self {
        Self::on(TestDb::create().await).await
    }

    /// A world on `db` as it is (e.g. not migrated yet).
    pub async fn on(db: TestDb) -> Self {
        Self {
            db,
            redis: RedisPrefix::new(),
            sink: SmtpSink::start(),
            overrides: Vec::new(),
        }
    }

    pub fn lock_key(&self) -> String {
        self.redis.key("lock")
    }

    /// Sets `INVOICE_REMINDER__<SECTION>__<KEY>` for settings built later.
    pub fn set(&mut self, key: &str, value: impl ToString) -> &mut Self {
        let name = format!(
            "INVOICE_REMINDER__{}",
            key.split('.')
                .map(str::to_uppercase)
                .collect::<Vec<_>>()
                .join("__")
        );
        self.overrides.push((name, value.to_string()));
        self
    }

    /// The environment a replica of this world runs with.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "INVOICE_REMINDER__DATABASE__URL".to_owned(),
                self.db.url.clone(),
            ),
            (
                "INVOICE_REMINDER__DATABASE__MAX_CONNECTIONS".to_owned(),
                "5".to_owned(),
            ),
            ("INVOICE_REMINDER__REDIS__URL".to_owned(), redis_url()),
            ("INVOICE_REMINDER__LOCK__KEY".to_owned(), self.lock_key()),
            ("INVOICE_REMINDER__LOCK__TTL".to_owned(), "2s".to_owned()),
            (
                "INVOICE_REMINDER__LOCK__RENEW_EVERY".to_owned(),
                "500ms".to_owned(),
            ),
            (
                "INVOICE_REMINDER__LOCK__MIN_HOLD".to_owned(),
                "0s".to_owned(),
            ),
            (
                "INVOICE_REMINDER__REDIS__TIMEOUT".to_owned(),
                "500ms".to_owned(),
            ),
            (
                "INVOICE_REMINDER__SMTP__HOST".to_owned(),
                "127.0.0.1".to_owned(),
            ),
            (
                "INVOICE_REMINDER__SMTP__PORT".to_owned(),
                self.sink.port().to_string(),
            ),
            (
                "INVOICE_REMINDER__SMTP__TIMEOUT".to_owned(),
                "5s".to_owned(),
            ),
            // Tests retry on the next tick; the backoff has tests of its own.
            (
                "INVOICE_REMINDER__REMINDERS__RETRY_BACKOFF".to_owned(),
                "0s".to_owned(),
            ),
        ];
        env.extend(self.overrides.iter().cloned());
        env
    }

    pub fn settings(&self) -> Settings {
        Settings::load(&ConfigSource {
            path: Some(default_config_path()),
            env: self.env(),
        })
        .expect("test settings are valid")
    }

    /// A replica's context (its own lock client, mailer and pool).
    pub async fn context(&self) -> Context {
        self.context_with(self.settings()).await
    }

    /// A replica's context with `settings`, its pool connected as `run`
    /// connects it (the connection options of `db::options` included).
    pub async fn context_with(&self, settings: Settings) -> Context {
        let pool = invoice_reminder::db::connect(&settings)
            .await
            .expect("connect replica pool");
        Context::new(settings, pool).expect("build context")
    }

    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// The test database as the library's db functions take it.
    pub fn database(&self) -> invoice_reminder::db::Db {
        invoice_reminder::db::Db::plain(self.db.pool.clone())
    }

    /// Waits until the SMTP sink has received `n` messages.
    pub async fn wait_for_mails(&self, n: usize) {
        wait_until(
            &format!("{n} mail(s) arrive"),
            Duration::from_secs(60),
            || async { self.sink.count() >= n },
        )
        .await;
    }
}

/// A tick running on its own task, and the shutdown token it watches.
pub struct BackgroundTick {
    pub handle: tokio::task::JoinHandle<Result<TickOutcome, TickError>>,
    pub stop: CancellationToken,
}

impl BackgroundTick {
    /// Waits for the tick and returns its outcome (panics if it failed).
    pub async fn outcome(self) -> TickOutcome {
        self.handle.await.expect("tick task").expect("tick")
    }
}

/// Starts `run_tick` on a task of its own.
pub fn spawn_tick(ctx: Context) -> BackgroundTick {
    let stop = CancellationToken::new();
    let token = stop.clone();
    let handle = tokio::spawn(async move { run_tick(&ctx, &token).await });
    BackgroundTick { handle, stop }
}

pub fn default_config_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.toml")
}

/// Creates `count` customers, each with one invoice overdue by 10 days.
/// Returns the invoice ids in order.
pub async fn insert_overdue(pool: &PgPool, count: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email)
             SELECT 'Customer ' || g, 'customer' || g || '@example.test'
               FROM generate_series(1, $1::bigint) g
             RETURNING id
         )
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, 12345, 'EUR', current_date - 10 FROM c
         RETURNING id",
    )
    .bind(count)
    .fetch_all(pool)
    .await
    .expect("insert overdue invoices")
}

/// One customer with one overdue invoice; returns the invoice id.
pub async fn insert_invoice(
    pool: &PgPool,
    name: &str,
    email: &str,
    due_days_ago: i32,
    paid: bool,
) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (INSERT INTO customers (name, email) VALUES ($1, $2) RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
         SELECT id, 'INV-X-' || id, 5000, 'EUR', current_date - $3, CASE WHEN $4 THEN now() END FROM c
         RETURNING id",
    )
    .bind(name)
    .bind(email)
    .bind(due_days_ago)
    .bind(paid)
    .fetch_one(pool)
    .await
    .expect("insert invoice")
}

/// The window of step `key` of the default stages today (database date,
/// UTC), and today's conditions with that window alone: what a direct
/// `claim_steps` call needs to claim that step.
pub async fn window(
    pool: &PgPool,
    key: &str,
) -> (
    invoice_reminder::stages::Window,
    invoice_reminder::db::owing::OwingDay,
) {
    let settings = Settings::load(&ConfigSource::default()).expect("default settings");
    let today = invoice_reminder::db::today(
        &invoice_reminder::db::Db::plain(pool.clone()),
        chrono_tz::UTC,
    )
    .await
    .expect("database date");
    let window = settings
        .reminders
        .stages
        .windows(today)
        .into_iter()
        .find(|w| w.step.key == key)
        .unwrap_or_else(|| panic!("no step {key}"));
    let owing = invoice_reminder::db::owing::OwingDay::new(
        today,
        "UTC",
        settings.reminders.min_days_between,
        std::slice::from_ref(&window),
    );
    (window, owing)
}

/// A run started without a lock (no fencing token): what a direct
/// `claim_steps` call in a test claims under.
pub async fn start_unlocked_run(db: &invoice_reminder::db::Db) -> i64 {
    invoice_reminder::db::runs::start_run(
        db,
        invoice_reminder::db::runs::NewRun {
            replica_id: "test",
            lock: None,
            run_date: "2026-11-30",
            lease: None,
        },
    )
    .await
    .expect("start run")
}

/// The test database's clock (`invoice_reminder_clock()`, which "today"
/// and the send window are read from) fixed at `instant`, a PostgreSQL
/// timestamptz literal (`2027-01-11T08:00:00Z`, `2025-07-11 12:00:00+00`).
pub async fn clock_at(world: &World, instant: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE OR REPLACE FUNCTION invoice_reminder_clock() RETURNS timestamptz
             LANGUAGE sql STABLE AS $$ SELECT timestamptz '{instant}' $$"
    )))
    .execute(world.pool())
    .await
    .expect("set the database clock");
}

/// `invoice-reminder <args>` with the world's configuration.
pub async fn cli(world: &World, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
        .arg("--config")
        .arg(default_config_path())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .output()
        .await
        .expect("run invoice-reminder")
}

pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Moves every invoice's due date `days` earlier: the day-by-day passing
/// of time, as the worker sees it (its "today" is the database's date).
pub async fn age_invoices(pool: &PgPool, days: i32) {
    sqlx::query("UPDATE invoices SET due_date = due_date - $1")
        .bind(days)
        .execute(pool)
        .await
        .expect("move due dates");
}

/// One invoice due `due_days_ago` days ago (negative: in the future) for a
/// customer with `locale`, of `amount` minor units of `currency`.
pub async fn insert_invoice_in(
    pool: &PgPool,
    name: &str,
    locale: Option<&str>,
    due_days_ago: i32,
    amount: i64,
    currency: &str,
) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (INSERT INTO customers (name, email, locale)
                    VALUES ($1, 'c' || md5($1) || '@example.test', $2) RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-L-' || id, $4, $5, current_date - $3 FROM c
         RETURNING id",
    )
    .bind(name)
    .bind(locale)
    .bind(due_days_ago)
    .bind(amount)
    .bind(currency)
    .fetch_one(pool)
    .await
    .expect("insert invoice")
}

/// Reminder statuses by invoice id.
pub async fn statuses(pool: &PgPool) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT invoice_id::bigint, status FROM reminders ORDER BY invoice_id::bigint")
        .fetch_all(pool)
        .await
        .expect("read reminders")
}

pub async fn count_status(pool: &PgPool, status: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM reminders WHERE status = $1")
        .bind(status)
        .fetch_one(pool)
        .await
        .expect("count reminders")
}

/// Polls `condition` until it holds or `timeout` passes (then panics with
/// `what`). The way tests wait: on a condition, never on a fixed sleep.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts no (invoice, period) was mailed twice, by the sink's count.
pub fn assert_no_duplicate_mail(sink: &SmtpSink) {
    let mut seen = std::collections::HashMap::new();
    for r in sink.received() {
        let key = (r.invoice_id(), r.period());
        *seen.entry(key).or_insert(0) += 1;
    }
    let dups: Vec<_> = seen.into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(dups.is_empty(), "mailed more than once: {dups:?}");
}

/// The fencing floor as a tick reads it before acquiring.
pub async fn fence_floor(world: &World) -> i64 {
    invoice_reminder::db::locks::fence_high_water(&world.database(), &world.lock_key())
        .await
        .expect("read fence high-water mark")
}

/// A raw Redis connection for arranging and inspecting lock keys.
pub async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis (is it running? see README)")
}

/// A templates directory of the test's own, removed on drop.
pub struct TemplateDir {
    pub path: PathBuf,
}

impl TemplateDir {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("templates-{}", uuid::Uuid::new_v4().simple()));
        for (name, source) in files {
            let file = path.join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, source).unwrap();
        }
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }
}

impl Drop for TemplateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
