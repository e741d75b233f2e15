//! The console at 1M reminders: `GET /` (the overview), `GET /unknown` and
//! an invoice's page (`GET /invoices/500000`: `explain`, its history, its
//! archived message) and, from a second console in customer mode, the page
//! of a customer with 200 invoices (`GET /customers/1`), answered by
//! consoles served in-process over a database of 1M
//! reminders, median and p95 of `CONSOLE_BENCH_REQUESTS` requests each
//! after a first one, whose time is printed too (for `/` it includes the
//! survey of what is owed, kept for 30 s) (BENCHMARKS.md, "The console at
//! 1M reminders").
//!
//! The database is seeded directly with SQL (`generate_series`): 1M
//! invoices over 10,000 customers, 1% unpaid, one reminder each, claimed
//! over the last 365 days (0.1% failed, 0.1% given up, 0.1% skipped, the
//! rest sent), and 20 unknown deliveries; then VACUUM ANALYZE, as
//! autovacuum leaves a table that size. Seeding takes about a minute,
//! far less than working 1M reminders through a tick.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (or
//! `TEST_POSTGRES_URL` / `TEST_REDIS_URL`); creates and drops its own
//! database (`CONSOLE_BENCH_KEEP=1` keeps it, to EXPLAIN the overview's
//! reads over it). `cargo bench --bench console`.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Empty, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use invoice_reminder::config::{ConfigSource, Settings};
use sqlx::Connection as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const USER: &str = "bench";
const PASSWORD: &str = "bench password";
/// The indexes the overview's reads are meant to use.
const INDEXES: [&str; 3] = [
    "reminders_claimed_day",
    "reminders_sent_day",
    "reminders_open_status",
];

const SEED: &[&str] = &[
    "INSERT INTO customers (name, email)
     SELECT 'Customer ' || g, 'customer' || g || '@example.test' FROM generate_series(1, 10000) g",
    "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
     SELECT 1 + g % 10000, 'INV-' || g, 1000 + g % 5000, 'EUR', current_date - (g % 400),
            CASE WHEN g % 100 <> 0 THEN now() END
       FROM generate_series(1, 1000000) g",
    "INSERT INTO reminders (invoice_id, period, status, attempts, message_id, claimed_at, created_at, sent_at, last_attempt_at)
     SELECT g::text, 'overdue', s.status, 1, 'invoice-' || g || '.overdue@bench.test', t.at, t.at,
            CASE WHEN s.status = 'sent' THEN t.at + interval '1 second' END, t.at
       FROM generate_series(1, 1000000) g,
            LATERAL (SELECT CASE g % 1000 WHEN 0 THEN 'failed' WHEN 1 THEN 'discarded'
                                          WHEN 2 THEN 'skipped' ELSE 'sent' END AS status) s,
            LATERAL (SELECT now() - make_interval(days => g % 365, secs => g % 80000) AS at) t",
    "INSERT INTO reminders (invoice_id, period, status, attempts, message_id, claimed_at, started_at)
     SELECT g::text, 'final', 'sending', 0, 'invoice-' || g || '.final@bench.test',
            now() - interval '1 hour', now() - interval '1 hour'
       FROM generate_series(1, 20) g",
    // Customer 1 has 200 invoices: the 100 above and these, each reminded.
    "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date, paid_at)
     SELECT 1, 'INV-C1-' || g, 2000 + g, 'EUR', current_date - g, NULL
       FROM generate_series(1, 100) g",
    "INSERT INTO reminders (invoice_id, period, status, attempts, message_id, claimed_at, created_at, sent_at, last_attempt_at, customer_id)
     SELECT i.id::text, 'overdue', 'sent', 1, 'invoice-' || i.id || '.overdue@bench.test',
            now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', now() - interval '1 day', '1'
       FROM invoices i WHERE i.number LIKE 'INV-C1-%'",
];

/// The customer whose page is asked for, with 200 invoices.
const CUSTOMER: &str = "1";

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let at = (sorted.len() * p).div_ceil(100).saturating_sub(1);
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn index_scans(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT indexrelname::text, idx_scan FROM pg_stat_user_indexes
          WHERE indexrelname = ANY($1) ORDER BY indexrelname",
    )
    .bind(&INDEXES[..])
    .fetch_all(pool)
    .await
    .expect("read pg_stat_user_indexes")
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let requests: usize = std::env::var("CONSOLE_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let admin = std::env::var("TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let redis = std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let name = format!("ir_console_bench_{}", std::process::id());
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create database");
    let url = match admin.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("TEST_POSTGRES_URL has no database"),
    };

    let phc = invoice_reminder::console::password_phc(PASSWORD).expect("hash");
    let config = std::env::temp_dir().join(format!("{name}.toml"));
    let text = std::fs::read_to_string("config/default.toml")
        .expect("config/default.toml")
        .replace("users = []\n", "")
        + &format!(
            "\n[[console.users]]\nname = \"{USER}\"\npassword_hash = \"{phc}\"\nrole = \"viewer\"\n"
        );
    std::fs::write(&config, text).expect("write config");
    let settings = Settings::load(&ConfigSource {
        path: Some(config.clone()),
        env: vec![
            ("INVOICE_REMINDER__DATABASE__URL".into(), url.clone()),
            ("INVOICE_REMINDER__REDIS__URL".into(), redis),
            ("INVOICE_REMINDER__LOCK__KEY".into(), format!("{name}:lock")),
        ],
    })
    .expect("settings");
    let _ = std::fs::remove_file(&config);

    let pool = invoice_reminder::db::connect(&settings)
        .await
        .expect("connect");
    invoice_reminder::db::migrate(&pool, &settings.database.schema)
        .await
        .expect("migrate");
    let started = Instant::now();
    let mut seed = pool.acquire().await.expect("connection");
    sqlx::raw_sql("SET search_path = invoice_reminder, public")
        .execute(&mut *seed)
        .await
        .expect("search_path");
    for statement in SEED {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*statement))
            .execute(&mut *seed)
            .await
            .expect("seed");
    }
    for table in ["customers", "invoices", "reminders"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
            .execute(&mut *seed)
            .await
            .expect("vacuum");
    }
    drop(seed);
    println!(
        "console: seeded 1,000,020 reminders over 1,000,000 invoices in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let stop = CancellationToken::new();
    let db = invoice_reminder::db::Db::new(pool.clone(), &settings);
    // A second console over the same database in customer mode, for a
    // customer's page.
    let mut by_customer = settings.clone();
    by_customer.reminders.group_by = invoice_reminder::config::GroupBy::Customer;
    let customer_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let customer_base = format!("http://{}", customer_listener.local_addr().expect("addr"));
    let customer_db = invoice_reminder::db::Db::new(pool.clone(), &by_customer);
    tokio::spawn(invoice_reminder::console::serve(
        settings,
        db,
        listener,
        stop.clone(),
    ));
    tokio::spawn(invoice_reminder::console::serve(
        by_customer,
        customer_db,
        customer_listener,
        stop.clone(),
    ));

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let login = hyper::Request::post(format!("{base}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(format!(
            "username={USER}&password={}",
            PASSWORD.replace(' ', "+")
        ))))
        .expect("request");
    let answer = client.request(login).await.expect("sign in");
    assert_eq!(answer.status(), 303, "signed in");
    let cookie = answer
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let customer_page = format!("{customer_base}/customers/{CUSTOMER}");

    let before = index_scans(&pool).await;
    let get = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let pages = [
        format!("{base}/"),
        format!("{base}/unknown"),
        format!("{base}/invoices/500000"),
        customer_page,
    ];
    for url in &pages {
        let path = url
            .split_once("//")
            .and_then(|(_, r)| r.split_once('/'))
            .map_or("/", |(_, p)| p);
        let path = format!("/{path}");
        let mut times = Vec::with_capacity(requests);
        let mut first = Duration::ZERO;
        // One request first: a console that has just started answers it
        // (prepared statements, the pool's connections) and, for `/`, runs
        // the survey of what is owed, which the overview keeps for 30 s.
        for i in 0..=requests {
            let request = hyper::Request::get(url)
                .header("cookie", &cookie)
                .body(Empty::new())
                .expect("request");
            let at = Instant::now();
            let response = get.request(request).await.expect("GET");
            let status = response.status();
            let body = response.into_body().collect().await.expect("body");
            let took = at.elapsed();
            assert_eq!(status, 200, "GET {path}: {:?}", body.to_bytes());
            if i > 0 {
                times.push(took);
            } else {
                first = took;
            }
        }
        times.sort();
        println!(
            "console: GET {path:<17} at 1M reminders: median {}, p95 {}, max {} ({requests} requests after the first, which took {})",
            ms(percentile(&times, 50)),
            ms(percentile(&times, 95)),
            ms(*times.last().expect("a request")),
            ms(first)
        );
    }
    // A backend flushes its counters when idle, within about 10 s.
    let used = |after: &[(String, i64)]| {
        after.len() == INDEXES.len() && before.iter().zip(after).all(|((_, was), (_, is))| is > was)
    };
    let mut after = index_scans(&pool).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !used(&after) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = index_scans(&pool).await;
    }
    for ((index, was), (_, is)) in before.iter().zip(&after) {
        println!(
            "console: index {index}: {} scans during the requests",
            is - was
        );
    }
    assert_eq!(after.len(), INDEXES.len(), "every index exists");
    assert!(
        before
            .iter()
            .zip(&after)
            .all(|((_, was), (_, is))| is > was),
        "every overview index is used"
    );

    stop.cancel();
    pool.close().await;
    if std::env::var_os("CONSOLE_BENCH_KEEP").is_some() {
        println!("console: kept the database {name} (CONSOLE_BENCH_KEEP)");
        return;
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .expect("drop database");
}
