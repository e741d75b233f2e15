//! Passwords never leave the process: with passwords in `database.url`
//! (in the user info, percent-encoded, and as `?password=`), in `redis.url`
//! and in `smtp.password`, none of them appears in any log line (at debug
//! level, so the libraries' own logs are read too), error, `status` output,
//! `/metrics` or `job_runs` row; whether the services refuse the
//! connection, refuse the password, or let us in.
//!
//! Each password holds '@', '?', '#' and '/' between pieces that appear
//! nowhere else, so any part of it shows, however it was cut or encoded.

use std::time::Duration;

use base64::Engine as _;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::common::pgbouncer::PgBouncer;
use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, Backend, World};
use crate::harness::{self, RedisServer, Replica, ReplicaOptions};

const DB_PASSWORD: &str = "Db1Qx@Db2Qx?Db3Qx#Db4Qx/Db5Qx";
const DB_QUERY_PASSWORD: &str = "Dq1Qx@Dq2Qx?Dq3Qx#Dq4Qx/Dq5Qx&Dq6Qx";
const REDIS_PASSWORD: &str = "Rd1Qx@Rd2Qx?Rd3Qx#Rd4Qx/Rd5Qx";
const SMTP_PASSWORD: &str = "Sm1Qx@Sm2Qx?Sm3Qx#Sm4Qx/Sm5Qx";
const SMTP_USER: &str = "billing";
const ALL: [&str; 4] = [
    DB_PASSWORD,
    DB_QUERY_PASSWORD,
    REDIS_PASSWORD,
    SMTP_PASSWORD,
];

fn encode(password: &str) -> String {
    utf8_percent_encode(password, NON_ALPHANUMERIC).to_string()
}

/// What would betray `password`: each piece between its special
/// characters (found in any cut or encoding of it), and the base64 an SMTP
/// `AUTH PLAIN` or `AUTH LOGIN` would carry it in.
fn tells(password: &str) -> Vec<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut tells: Vec<String> = password
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_owned)
        .collect();
    tells.push(b64.encode(password));
    tells.push(b64.encode(format!("\0{SMTP_USER}\0{password}")));
    tells
}

/// Panics if `text` (what `what` showed) holds any part of any password.
fn assert_no_password(what: &str, text: &str) {
    for password in ALL {
        for tell in tells(password) {
            assert!(
                !text.contains(&tell),
                "{what} shows {tell:?} of the password {password:?}:\n{text}"
            );
        }
    }
}

/// `invoice-reminder <args>`: exit code and stdout + stderr.
async fn cli(world: &World, args: &[&str]) -> (Option<i32>, String) {
    let out = common::cli(world, args).await;
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), shown)
}

/// Runs each command and checks its output; returns the outputs.
async fn run_commands(world: &World, commands: &[&[&str]]) -> Vec<(Option<i32>, String)> {
    let mut outputs = Vec::new();
    for args in commands {
        let (code, shown) = cli(world, args).await;
        assert!(!shown.contains("panicked"), "{args:?}: {shown}");
        assert_no_password(&format!("`{}` (exit {code:?})", args.join(" ")), &shown);
        outputs.push((code, shown));
    }
    outputs
}

/// `postgres://postgres:<password>@...` for the world's database, at `port`.
fn database_url_with_password(world: &World, password: &str, port: u16) -> String {
    world
        .db
        .url
        .replace("postgres@", &format!("postgres:{}@", encode(password)))
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{port}"))
}

/// The world's database URL with the password as a query parameter.
fn database_url_with_query_password(world: &World, port: u16) -> String {
    let url = world
        .db
        .url
        .replace("127.0.0.1:5432", &format!("127.0.0.1:{port}"));
    format!("{url}?password={}", encode(DB_QUERY_PASSWORD))
}

/// `run` until it has logged a tick's end (or a failed tick), then SIGTERM:
/// its whole log.
async fn run_briefly(world: &World, env: &[(&str, String)], until: &str) -> String {
    let mut replica = Replica::spawn(
        world,
        "secret-keeper",
        ReplicaOptions {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..ReplicaOptions::default()
        },
    );
    common::wait_until(
        &format!("the replica logs {until:?}"),
        Duration::from_secs(30),
        || async { replica.log().contains(until) },
    )
    .await;
    replica.stop_gracefully().await;
    let log = replica.log();
    assert!(log.contains("worker starting"), "{log}");
    log
}

const EVERY_COMMAND: &[&[&str]] = &[
    &["run-once"],
    &["status"],
    &["status", "--json"],
    &["audit", "--json"],
    &["check-source"],
    &["migrate"],
    &["preview", "--invoice", "1"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_shown_when_nothing_listens_where_the_urls_point() {
    let mut world = harness::world_for(Backend::Redis).await;
    let (db_port, redis_port, smtp_port) = (
        harness::free_port(),
        harness::free_port(),
        harness::free_port(),
    );
    world
        .set("log.level", "debug")
        .set("database.connect_timeout", "1s")
        .set(
            "redis.url",
            format!(
                "redis://:{}@127.0.0.1:{redis_port}/0",
                encode(REDIS_PASSWORD)
            ),
        )
        .set("smtp.port", smtp_port)
        .set("smtp.username", SMTP_USER)
        .set("smtp.password", SMTP_PASSWORD);

    for url in [
        database_url_with_password(&world, DB_PASSWORD, db_port),
        database_url_with_query_password(&world, db_port),
    ] {
        world.set("database.url", &url);
        let outputs = run_commands(&world, EVERY_COMMAND).await;
        assert!(
            outputs.iter().all(|(code, _)| *code != Some(0)),
            "every command fails without a database: {outputs:?}"
        );
        let log = run_briefly(&world, &[], "tick failed").await;
        assert_no_password("`run` (database refused)", &log);
    }

    // The database answers (and ignores the password); Redis and SMTP do not.
    let url = database_url_with_password(&world, DB_PASSWORD, 5432);
    world.set("database.url", url);
    common::insert_overdue(world.pool(), 2).await;
    let outputs = run_commands(&world, &[&["run-once"], &["status"]]).await;
    assert_ne!(outputs[0].0, Some(0), "Redis is down: {}", outputs[0].1);
    world.set("lock.on_backend_error", "database-only");
    let outputs = run_commands(&world, &[&["run-once"], &["status"]]).await;
    assert!(
        outputs[0].1.contains("smtp"),
        "the tick reached the SMTP server: {}",
        outputs[0].1
    );
    assert_no_password("job_runs and reminders", &recorded(&world).await);
}

/// A source view whose rows fail the claim's query: a tick that records
/// its error in `job_runs`.
async fn use_a_source_that_fails_every_page(world: &mut World) {
    sqlx::raw_sql(
        "CREATE SCHEMA broken;
         CREATE VIEW broken.invoices AS
         SELECT i.id::text AS invoice_id, i.number AS invoice_number,
                c.name AS customer_name, c.email, c.locale,
                i.amount_cents / (i.id - i.id) AS amount_minor,
                i.currency, i.due_date, i.paid_at IS NOT NULL AS is_paid,
                false AS paused, NULL::date AS paused_until,
                NULL::text AS payment_url
           FROM invoice_reminder.invoices i
           JOIN invoice_reminder.customers c ON c.id = i.customer_id;",
    )
    .execute(world.pool())
    .await
    .expect("create the failing view");
    world.set("source.relation", "broken.invoices");
}

/// Every row of `job_runs` and `reminders`, as text.
async fn recorded(world: &World) -> String {
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT row_to_json(j)::text FROM job_runs j
         UNION ALL SELECT row_to_json(r)::text FROM reminders r",
    )
    .fetch_all(world.pool())
    .await
    .expect("read job_runs and reminders");
    rows.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_shown_in_logs_status_metrics_or_job_runs_when_the_services_answer() {
    let redis = RedisServer::start_with_password(REDIS_PASSWORD).await;
    let relay = Relay::start(RelayOptions {
        auth: Some((SMTP_USER.into(), SMTP_PASSWORD.into())),
        ..RelayOptions::default()
    })
    .await;
    let mut world = harness::world_for(Backend::Redis).await;
    let url = database_url_with_password(&world, DB_PASSWORD, 5432);
    world
        .set("log.level", "debug")
        .set("database.url", &url)
        .set("redis.url", redis.url())
        .set("smtp.port", relay.port)
        .set("smtp.username", SMTP_USER)
        .set("smtp.password", SMTP_PASSWORD);
    common::insert_overdue(world.pool(), 3).await;

    // PostgreSQL here trusts every login: the password is sent and ignored.
    let outputs = run_commands(&world, EVERY_COMMAND).await;
    assert_eq!(outputs[0].0, Some(0), "run-once: {}", outputs[0].1);
    assert_eq!(relay.messages(), 3, "the relay took our password");
    common::insert_overdue(world.pool(), 2).await;
    let port = harness::free_port();
    let listen = [(
        "INVOICE_REMINDER__HTTP__LISTEN",
        format!("127.0.0.1:{port}"),
    )];
    let log = run_briefly(&world, &listen, "tick finished").await;
    assert_no_password("`run`", &log);
    assert_eq!(relay.messages(), 5);

    // The same with the database password as a query parameter.
    let url = database_url_with_query_password(&world, 5432);
    world.set("database.url", url);
    run_commands(&world, &[&["run-once"], &["status"]]).await;

    // /metrics of a replica that has worked a tick.
    let mut replica = Replica::spawn(
        &world,
        "metrics",
        ReplicaOptions {
            env: listen
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..ReplicaOptions::default()
        },
    );
    common::wait_until(
        "/metrics counts a tick",
        Duration::from_secs(30),
        || async {
            crate::http::get(port, "/metrics")
                .await
                .is_some_and(|(_, body)| body.contains("invoice_reminder_ticks_total{"))
        },
    )
    .await;
    let (_, metrics) = crate::http::get(port, "/metrics").await.expect("/metrics");
    replica.stop_gracefully().await;
    assert_no_password("/metrics", &metrics);
    assert_no_password("`run` serving /metrics", &replica.log());

    // A tick that fails records its error in job_runs.
    use_a_source_that_fails_every_page(&mut world).await;
    common::insert_overdue(world.pool(), 1).await;
    let outputs = run_commands(&world, &[&["run-once"], &["status"], &["status", "--json"]]).await;
    assert_ne!(outputs[0].0, Some(0), "the tick fails: {}", outputs[0].1);
    let errors: Vec<String> =
        sqlx::query_scalar("SELECT error FROM job_runs WHERE error IS NOT NULL")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert!(
        errors.iter().any(|e| e.contains("division by zero")),
        "the failed tick recorded its error: {errors:?}"
    );
    assert_no_password("job_runs and reminders", &recorded(&world).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_shown_when_a_service_refuses_it() {
    let redis = RedisServer::start_with_password(REDIS_PASSWORD).await;
    let relay = Relay::start(RelayOptions {
        auth: Some((SMTP_USER.into(), "not-the-password".into())),
        ..RelayOptions::default()
    })
    .await;
    let bouncer = PgBouncer::start(Some("not-the-password")).await;
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("log.level", "debug")
        .set("smtp.port", relay.port)
        .set("smtp.username", SMTP_USER)
        .set("smtp.password", SMTP_PASSWORD);
    common::insert_overdue(world.pool(), 2).await;

    // Redis refuses the password.
    world.set(
        "redis.url",
        format!(
            "redis://:{}@127.0.0.1:{}",
            encode(SMTP_PASSWORD),
            redis.port
        ),
    );
    let outputs = run_commands(&world, &[&["run-once"], &["status"]]).await;
    assert_eq!(outputs[0].0, Some(2), "{}", outputs[0].1);

    // The relay refuses the SMTP password.
    world.set("redis.url", redis.url());
    let outputs = run_commands(&world, &[&["run-once"], &["status"]]).await;
    assert_eq!(outputs[0].0, Some(2), "{}", outputs[0].1);
    assert!(relay.auth_failures() > 0);

    // PgBouncer refuses the database password.
    let url = bouncer.url(&database_url_with_password(&world, DB_PASSWORD, 5432));
    world
        .set("database.pooler", "transaction")
        .set("database.url", url);
    let outputs = run_commands(&world, &[&["run-once"], &["status"], &["audit"]]).await;
    assert_eq!(outputs[0].0, Some(2), "{}", outputs[0].1);
    let url = bouncer.url(&database_url_with_query_password(&world, 5432));
    world.set("database.url", url);
    let outputs = run_commands(&world, &[&["run-once"]]).await;
    assert_eq!(outputs[0].0, Some(2), "{}", outputs[0].1);
    assert_no_password("job_runs and reminders", &recorded(&world).await);
}
