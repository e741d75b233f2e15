//! `POST /webhooks/bounces` on a real `run` process: signed (Standard
//! Webhooks), unsigned, stale, replayed and oversized requests, Postmark's
//! documented bounce body with basic auth, and a bounce received while a
//! backlog is being sent stopping the next reminder to that address.

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Backend, SmtpMode, World};
use crate::harness::{self, Replica, ReplicaOptions};
use crate::http::{get, sample, wait_for_status};

/// A key of our own for each test, in the scheme's form.
pub(crate) fn new_secret() -> String {
    let key: [u8; 24] = rand_bytes();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(16) {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    out
}

const BASIC_AUTH: &str = "postmark:hunter2-basic";

/// A replica serving the webhook on a port of its own.
pub(crate) async fn spawn_webhook(world: &World, secret: &str) -> (Replica, u16) {
    let port = harness::free_port();
    let replica = Replica::spawn(
        world,
        "webhook",
        ReplicaOptions {
            env: vec![
                (
                    "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
                    format!("127.0.0.1:{port}"),
                ),
                (
                    "INVOICE_REMINDER__HTTP__WEBHOOK_SECRET".to_owned(),
                    secret.to_owned(),
                ),
                (
                    "INVOICE_REMINDER__HTTP__WEBHOOK_BASIC_AUTH".to_owned(),
                    BASIC_AUTH.to_owned(),
                ),
            ],
            ..ReplicaOptions::default()
        },
    );
    wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    (replica, port)
}

/// `POST /webhooks/bounces` with `headers` and `body`: (status, body).
pub(crate) async fn post(port: u16, headers: &[(String, String)], body: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the replica");
    let mut request = format!(
        "POST /webhooks/bounces HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    // The server may answer (413) before it has read a large body.
    let _ = stream.write_all(&bytes).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The Standard Webhooks headers for `body`, signed with `secret` at
/// `timestamp` (unix seconds) under message id `id`.
pub(crate) fn signed(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
    let signature = standardwebhooks::Webhook::new(secret)
        .unwrap()
        .sign(id, timestamp, body)
        .unwrap();
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), timestamp.to_string()),
        ("webhook-signature".into(), signature),
    ]
}

pub(crate) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(crate) fn bounce(address: &str, kind: &str) -> Vec<u8> {
    serde_json::json!({"address": address, "kind": kind, "detail": "550 5.1.1 no such user"})
        .to_string()
        .into_bytes()
}

async fn suppressed(world: &World) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT address, reason, source FROM suppressions ORDER BY address")
        .fetch_all(world.pool())
        .await
        .unwrap()
}

/// `/metrics` once a tick has been counted in it (a tick's duration is
/// observed after its counts, so they are all there).
async fn tick_counted_metrics(port: u16) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = get(port, "/metrics")
            .await
            .map(|(_, m)| m)
            .unwrap_or_default();
        if sample(&metrics, "invoice_reminder_tick_duration_seconds_count") >= 1.0 {
            return metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no tick counted within 30 s: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_bounce_suppresses_its_address_and_the_same_webhook_id_again_is_refused() {
    let world = harness::world_for(Backend::Redis).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;
    let body = bounce("Gone@Example.test", "hard_bounce");
    let headers = signed(&secret, "msg_first", now(), &body);

    let (status, answer) = post(port, &headers, &body).await;
    let (replayed, replay_answer) = post(port, &headers, &body).await;
    let complaint = bounce("spam@example.test", "complaint");
    let (second, _) = post(
        port,
        &signed(&secret, "msg_second", now(), &complaint),
        &complaint,
    )
    .await;
    let (_, metrics) = get(port, "/metrics").await.unwrap();
    replica.stop_gracefully().await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(replayed, 409, "{replay_answer}");
    assert_eq!(second, 200);
    assert_eq!(
        suppressed(&world).await,
        vec![
            (
                "Gone@Example.test".into(),
                "hard_bounce".into(),
                "webhook".into()
            ),
            (
                "spam@example.test".into(),
                "complaint".into(),
                "webhook".into()
            ),
        ]
    );
    let detail: Option<String> =
        sqlx::query_scalar("SELECT detail FROM suppressions WHERE address = 'Gone@Example.test'")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(detail.as_deref(), Some("550 5.1.1 no such user"));
    let accepted = r#"invoice_reminder_webhook_requests_total{outcome="accepted"}"#;
    let replays = r#"invoice_reminder_webhook_requests_total{outcome="replayed"}"#;
    assert_eq!(sample(&metrics, accepted), 2.0, "{metrics}");
    assert_eq!(sample(&metrics, replays), 1.0, "{metrics}");
    assert!(!replica.log().contains(&secret), "the secret was logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_wrongly_signed_stale_oversized_and_unreadable_requests_are_refused_never_with_500()
 {
    let world = harness::world_for(Backend::Redis).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;
    let body = bounce("nobody@example.test", "hard_bounce");

    let (unsigned, _) = post(port, &[], &body).await;
    let other_key = new_secret();
    let (wrong_key, _) = post(port, &signed(&other_key, "msg_a", now(), &body), &body).await;
    let mut tampered_headers = signed(&secret, "msg_b", now(), &body);
    let tampered = bounce("somebody-else@example.test", "hard_bounce");
    let (tampered_status, _) = post(port, &tampered_headers, &tampered).await;
    tampered_headers[2].1 = "v1,bm90IGEgc2lnbmF0dXJl".into();
    let (garbage_signature, _) = post(port, &tampered_headers, &body).await;
    let (stale, stale_answer) = post(
        port,
        &signed(&secret, "msg_c", now() - 6 * 60, &body),
        &body,
    )
    .await;
    let (future, _) = post(
        port,
        &signed(&secret, "msg_d", now() + 6 * 60, &body),
        &body,
    )
    .await;
    let mut big = br#"{"address":"big@example.test","kind":"hard_bounce","detail":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 64 * 1024));
    big.extend_from_slice(br#""}"#);
    let (oversized, _) = post(port, &signed(&secret, "msg_e", now(), &big), &big).await;
    let mut unreadable = Vec::new();
    for (i, text) in [
        "not json",
        r#"{"address":"x@example.test","kind":"maybe"}"#,
        r#"{"address":"not an address","kind":"hard_bounce"}"#,
        r#"{"something":"else"}"#,
        r#"{"address":["x@example.test"],"kind":"hard_bounce"}"#,
    ]
    .iter()
    .enumerate()
    {
        let headers = signed(&secret, &format!("msg_bad_{i}"), now(), text.as_bytes());
        unreadable.push(post(port, &headers, text.as_bytes()).await.0);
    }
    let (_, metrics) = get(port, "/metrics").await.unwrap();
    replica.stop_gracefully().await;

    assert_eq!(unsigned, 401);
    assert_eq!(wrong_key, 401);
    assert_eq!(tampered_status, 401, "a body that is not the one signed");
    assert_eq!(garbage_signature, 401);
    assert_eq!(stale, 401, "{stale_answer}");
    assert!(stale_answer.contains("5 minutes"), "{stale_answer}");
    assert_eq!(future, 401);
    assert_eq!(oversized, 413);
    assert_eq!(unreadable, vec![400; 5]);
    assert_eq!(
        suppressed(&world).await,
        vec![],
        "nothing refused may suppress"
    );
    let count = |outcome: &str| {
        sample(
            &metrics,
            &format!(r#"invoice_reminder_webhook_requests_total{{outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(count("unauthorized"), 4.0, "{metrics}");
    assert_eq!(count("stale"), 2.0, "{metrics}");
    assert_eq!(count("too_large"), 1.0, "{metrics}");
    assert_eq!(count("bad_request"), 5.0, "{metrics}");
    assert_eq!(count("accepted"), 0.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postmarks_documented_bounce_body_with_basic_auth_suppresses_and_a_soft_bounce_is_only_logged()
 {
    let world = harness::world_for(Backend::Redis).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;
    let fixture = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/postmark/bounce.json"),
    )
    .unwrap();
    let mut soft: Value = serde_json::from_slice(&fixture).unwrap();
    soft["Type"] = "SoftBounce".into();
    soft["Email"] = "full-mailbox@example.test".into();
    let soft = soft.to_string().into_bytes();
    let auth = |pair: &str| {
        vec![(
            "Authorization".to_owned(),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ),
        )]
    };

    let (hard, answer) = post(port, &auth(BASIC_AUTH), &fixture).await;
    let (soft_status, soft_answer) = post(port, &auth(BASIC_AUTH), &soft).await;
    let (wrong, _) = post(port, &auth("postmark:wrong"), &fixture).await;
    let (none, _) = post(port, &[], &fixture).await;
    replica.stop_gracefully().await;

    assert_eq!(hard, 200, "{answer}");
    assert_eq!(soft_status, 200, "{soft_answer}");
    assert!(soft_answer.contains("ignored"), "{soft_answer}");
    assert_eq!(wrong, 401);
    assert_eq!(none, 401);
    assert_eq!(
        suppressed(&world).await,
        vec![(
            "john@example.com".into(),
            "hard_bounce".into(),
            "postmark".into()
        )]
    );
    let log = replica.log();
    assert!(
        log.contains("full-mailbox@example.test"),
        "the soft bounce is logged: {log}"
    );
    assert!(
        !log.contains("hunter2"),
        "the basic auth password was logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_without_a_secret_stops_start_up_with_exit_2_naming_it() {
    let world = harness::world_for(Backend::Redis).await;
    let port = harness::free_port();
    let mut replica = Replica::spawn(
        &world,
        "plain",
        ReplicaOptions {
            env: vec![
                (
                    "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
                    format!("127.0.0.1:{port}"),
                ),
                (
                    "INVOICE_REMINDER__HTTP__WEBHOOK_BASIC_AUTH".to_owned(),
                    "postmark:hunter2".to_owned(),
                ),
            ],
            ..ReplicaOptions::default()
        },
    );

    let status = replica.wait_exit(Duration::from_secs(15)).await;

    assert_eq!(status.and_then(|s| s.code()), Some(2), "{}", replica.log());
    let log = replica.log();
    assert!(log.contains("http.webhook_basic_auth"), "{log}");
    assert!(log.contains("needs http.webhook_secret"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounce_received_mid_backlog_stops_the_next_reminder_to_that_address() {
    let mut world = harness::world_for(Backend::Redis).await;
    // One mail at a time, 100 ms each, at most 10 rows claimed ahead: the
    // backlog takes seconds, and the victim's second invoice is claimed
    // some 30 mails after its first one arrives.
    world
        .set("reminders.batch_size", 5)
        .set("reminders.send_concurrency", 1)
        .set("smtp.pool_size", 1);
    world
        .sink
        .set_mode(SmtpMode::Delay(Duration::from_millis(100)));
    // Claimed first: the final step's window comes before the overdue one.
    let first =
        common::insert_invoice(world.pool(), "Victim", "victim@example.test", 25, false).await;
    common::insert_overdue(world.pool(), 40).await;
    // Claimed last: the newest due date of the overdue window.
    let second =
        common::insert_invoice(world.pool(), "Victim", "Victim@Example.test", 5, false).await;
    let secret = new_secret();
    let (mut replica, port) = spawn_webhook(&world, &secret).await;

    common::wait_until(
        "the victim's first reminder arrives",
        Duration::from_secs(60),
        || async { world.sink.invoice_ids().contains(&first) },
    )
    .await;
    let body = bounce("victim@example.test", "hard_bounce");
    let (status, answer) = post(port, &signed(&secret, "msg_mid", now(), &body), &body).await;
    harness::wait_until_settled(&world, &[], Duration::from_secs(60)).await;
    // The rows settle before the tick publishes its counts: wait for the
    // tick itself to be counted (its duration is observed last).
    let metrics = tick_counted_metrics(port).await;
    replica.stop_gracefully().await;

    assert_eq!(status, 200, "{answer}");
    let mailed = world.sink.invoice_ids();
    assert!(!mailed.contains(&second), "reminded after the bounce");
    assert_eq!(mailed.len(), 41, "every other reminder still went out");
    let (row_status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error FROM reminders WHERE invoice_id = $1::text")
            .bind(second)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(
        (row_status.as_str(), reason.as_deref()),
        ("skipped", Some("suppressed"))
    );
    assert_eq!(
        sample(&metrics, "invoice_reminder_suppressed_total"),
        1.0,
        "{metrics}"
    );
    let report = harness::assert_exactly_once(&world, 0).await;
    assert_eq!(report["skipped_count"], 1, "{report}");
}
