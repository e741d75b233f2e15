//! Watching a replica from outside: `/healthz`, `/readyz`,
//! `/metrics`, the `health` command, and `run` exiting when its scheduler
//! dies or a tick hangs.

use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::proxy::Proxy;
use crate::common::{self, Backend, SmtpMode, World};
use crate::harness::{self, BINARY, Replica, ReplicaOptions};

/// `GET path` on the replica's listener: (status, body); None when nothing
/// answers.
pub(crate) async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .ok()?
        .ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

pub(crate) async fn wait_for_status(
    port: u16,
    path: &str,
    status: u16,
    timeout: Duration,
) -> String {
    let mut last = None;
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        last = get(port, path).await;
        if let Some((s, body)) = &last
            && *s == status
        {
            return body.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{path} never answered {status} within {timeout:?}; last answer: {last:?}");
}

/// A replica of `world` listening on a port of its own.
fn spawn_listening(world: &World, extra: &[(&str, &str)]) -> (Replica, u16) {
    let port = harness::free_port();
    let mut env = vec![(
        "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
        format!("127.0.0.1:{port}"),
    )];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let replica = Replica::spawn(
        world,
        "watched",
        ReplicaOptions {
            env,
            ..ReplicaOptions::default()
        },
    );
    (replica, port)
}

/// The value of one sample line of an OpenMetrics exposition.
pub(crate) fn sample(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_ok_while_idle_and_while_a_tick_is_sending() {
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("reminders.send_concurrency", 1)
        .set("smtp.pool_size", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(50)));
    let (mut replica, port) = spawn_listening(&world, &[]);

    let idle = wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    assert_eq!(idle.trim(), r#"{"status":"ok"}"#);
    common::insert_overdue(world.pool(), 100).await;
    world.wait_for_mails(5).await;
    assert!(world.sink.count() < 100, "the tick should still be sending");
    let busy = get(port, "/healthz").await;

    assert_eq!(busy.map(|(s, _)| s), Some(200));
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_stuck_past_max_tick_duration_fails_healthz_and_the_replica_exits_non_zero() {
    // An SMTP server that accepts connections and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let mut world = harness::world_for(Backend::Redis).await;
    world
        .set("smtp.port", silent_port)
        .set("smtp.timeout", "60s")
        .set("schedule.max_tick_duration", "2s")
        .set("shutdown.timeout", "3s");
    common::insert_overdue(world.pool(), 3).await;
    let (mut replica, port) = spawn_listening(&world, &[]);

    let body = wait_for_status(port, "/healthz", 503, Duration::from_secs(20)).await;
    let status = replica.wait_exit(Duration::from_secs(20)).await;

    assert!(body.contains(r#""status":"fail""#), "{body}");
    assert!(body.contains("max_tick_duration"), "{body}");
    let status = status.expect("the hung replica should exit by itself");
    assert!(!status.success(), "exit status {status:?}");
    assert!(replica.log().contains("hung"), "{}", replica.log());
    held.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_postgres_is_cut_with_a_fixed_reason_and_the_cause_in_the_log_and_recovers_after()
 {
    let mut world = harness::world_for(Backend::Redis).await;
    let (proxy, via_proxy) = Proxy::for_postgres(&world.db.url).await;
    world.set("database.url", via_proxy);
    let (mut replica, port) = spawn_listening(&world, &[]);
    wait_for_status(port, "/readyz", 200, Duration::from_secs(15)).await;

    proxy.go_down();
    let down = wait_for_status(port, "/readyz", 503, Duration::from_secs(15)).await;
    let live_meanwhile = get(port, "/healthz").await.map(|(s, _)| s);
    proxy.come_up().await;
    wait_for_status(port, "/readyz", 200, Duration::from_secs(15)).await;

    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&down).unwrap(),
        serde_json::json!({"status": "fail", "reason": "database: unavailable"}),
        "{down}"
    );
    let log = replica.log();
    assert!(
        log.lines()
            .any(|l| l.contains("/readyz: unavailable") && l.contains("dependency=\"database\"")),
        "{log}"
    );
    assert_eq!(
        live_meanwhile,
        Some(200),
        "a database outage must not fail liveness"
    );
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_database_recorded() {
    let world = harness::world_for(Backend::Redis).await;
    common::insert_overdue(world.pool(), 40).await;
    let (mut replica, port) = spawn_listening(&world, &[]);
    world.wait_for_mails(40).await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(30)).await;
    // One more tick finishes after everything is recorded.
    let runs_now: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs")
        .fetch_one(world.pool())
        .await
        .unwrap();
    harness::wait_for_runs(&world, runs_now + 1, Duration::from_secs(15)).await;

    let (status, metrics) = get(port, "/metrics").await.expect("metrics answer");
    let sent_rows = common::count_status(world.pool(), "sent").await;
    let done_runs: i64 = sqlx::query_scalar("SELECT count(*) FROM job_runs WHERE outcome = 'done'")
        .fetch_one(world.pool())
        .await
        .unwrap();

    assert_eq!(status, 200);
    assert_eq!(
        sample(
            &metrics,
            r#"invoice_reminder_reminders_total{result="sent"}"#
        ),
        sent_rows as f64,
        "{metrics}"
    );
    assert_eq!(sent_rows, 40);
    assert!(
        sample(&metrics, r#"invoice_reminder_ticks_total{outcome="done"}"#)
            >= done_runs as f64 - 1.0,
        "{metrics}"
    );
    assert!(sample(&metrics, "invoice_reminder_last_success_timestamp_seconds") > 1.7e9);
    assert!(
        sample(
            &metrics,
            r#"invoice_reminder_lock_acquisitions_total{result="acquired"}"#
        ) >= 1.0
    );
    assert!(
        sample(
            &metrics,
            "invoice_reminder_smtp_transaction_duration_seconds_count"
        ) >= 40.0
    );
    assert!(
        metrics.contains("invoice_reminder_tick_duration_seconds_bucket"),
        "{metrics}"
    );
    assert!(metrics.contains("invoice_reminder_lock_held "), "{metrics}");
    replica.stop_gracefully().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_scheduler_dies_exits_non_zero() {
    let world = harness::world_for(Backend::Redis).await;
    let (mut replica, _port) = spawn_listening(
        &world,
        &[("INVOICE_REMINDER_TEST_FAULT", "scheduler-panic")],
    );

    let status = replica.wait_exit(Duration::from_secs(20)).await;

    let status = status.expect("a replica without its scheduler should exit");
    assert_eq!(status.code(), Some(1), "{}", replica.log());
    assert!(
        replica.log().contains("scheduler task died"),
        "{}",
        replica.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_command_reports_a_healthy_worker_and_a_missing_listener() {
    let world = harness::world_for(Backend::Redis).await;
    let (mut replica, port) = spawn_listening(&world, &[]);
    wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    let health = |listen: String| {
        Command::new(BINARY)
            .env_clear()
            .env("INVOICE_REMINDER__HTTP__LISTEN", listen)
            .arg("health")
            .output()
            .expect("run health")
    };

    let healthy = health(format!("127.0.0.1:{port}"));
    let off = health(String::new());
    replica.stop_gracefully().await;
    let gone = health(format!("127.0.0.1:{port}"));

    assert_eq!(healthy.status.code(), Some(0), "{healthy:?}");
    assert!(String::from_utf8_lossy(&healthy.stdout).contains("healthy"));
    assert_eq!(off.status.code(), Some(1), "{off:?}");
    assert!(String::from_utf8_lossy(&off.stdout).contains("http.listen is off"));
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_cannot_bind_exits_1_naming_http_listen() {
    let world = harness::world_for(Backend::Redis).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut replica = Replica::spawn(
        &world,
        "clash",
        ReplicaOptions {
            env: vec![(
                "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
                format!("127.0.0.1:{port}"),
            )],
            ..ReplicaOptions::default()
        },
    );

    let status = replica.wait_exit(Duration::from_secs(10)).await;

    assert_eq!(status.and_then(|s| s.code()), Some(1), "{}", replica.log());
    assert!(replica.log().contains("http.listen"), "{}", replica.log());
}
