//! The HTTP listener against hostile clients, on a real `run` process: 300
//! slow webhook clients under a low `ulimit -n` while ticks send mail;
//! headers, bodies and kept-alive connections that stall, each closed at
//! its deadline; and the webhook on an address of its own, without
//! `/metrics` and `/readyz`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::common::{self, Backend, World};
use crate::harness::{self, Replica, ReplicaOptions};
use crate::http::{get, wait_for_status};

/// How many slow clients attack at once.
const SLOW_CLIENTS: usize = 300;

/// How often a slow client sends one more byte of its body.
const TRICKLE: Duration = Duration::from_secs(2);

/// The listener's read deadlines in these tests.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const BODY_TIMEOUT: Duration = Duration::from_secs(3);

/// A replica of `world` listening (webhook on) under `ulimit -n files`.
fn spawn_limited(world: &World, files: u64, extra: &[(&str, String)]) -> (Replica, u16) {
    let port = harness::free_port();
    let mut env = vec![
        (
            "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
            format!("127.0.0.1:{port}"),
        ),
        (
            "INVOICE_REMINDER__HTTP__WEBHOOK_SECRET".to_owned(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
        ),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let replica = Replica::spawn(
        world,
        "held",
        ReplicaOptions {
            env,
            max_open_files: Some(files),
            ..ReplicaOptions::default()
        },
    );
    (replica, port)
}

/// [`HEADER_TIMEOUT`] and [`BODY_TIMEOUT`] as settings.
fn deadlines() -> [(&'static str, String); 2] {
    [
        (
            "INVOICE_REMINDER__HTTP__HEADER_READ_TIMEOUT",
            format!("{}s", HEADER_TIMEOUT.as_secs()),
        ),
        (
            "INVOICE_REMINDER__HTTP__BODY_READ_TIMEOUT",
            format!("{}s", BODY_TIMEOUT.as_secs()),
        ),
    ]
}

/// What the slow clients saw.
#[derive(Default)]
struct Attack {
    /// Connections opened.
    opened: AtomicU64,
    /// How long each connection the server closed had been open.
    dropped: Mutex<Vec<Duration>>,
    /// When each client's current connection was opened.
    open: Mutex<HashMap<usize, Instant>>,
}

impl Attack {
    fn dropped(&self) -> Vec<Duration> {
        self.dropped.lock().unwrap().clone()
    }

    /// The age of the oldest connection still open.
    fn oldest_open(&self) -> Duration {
        let now = Instant::now();
        self.open
            .lock()
            .unwrap()
            .values()
            .map(|since| now - *since)
            .max()
            .unwrap_or_default()
    }
}

/// A client that sends a signed-looking webhook's headers at once, then
/// its body one byte per [`TRICKLE`]; when the server closes, it connects
/// again, until `stop`.
async fn slow_client(port: u16, me: usize, attack: Arc<Attack>, stop: CancellationToken) {
    let head = format!(
        "POST /webhooks/bounces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nwebhook-id: msg_slow_{me}\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,c2xvdyBjbGllbnQ=\r\n\r\n",
        chrono::Utc::now().timestamp()
    );
    while !stop.is_cancelled() {
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            // Refused: an attacker tries again.
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(TRICKLE) => continue,
            }
        };
        let since = Instant::now();
        attack.opened.fetch_add(1, Ordering::Relaxed);
        attack.open.lock().unwrap().insert(me, since);
        let mut closed = stream.write_all(head.as_bytes()).await.is_err();
        let mut answer = [0u8; 512];
        while !closed {
            tokio::select! {
                _ = stop.cancelled() => break,
                read = stream.read(&mut answer) => {
                    // An answer (408, 503, ...) is followed by the close.
                    closed = matches!(read, Ok(0) | Err(_));
                }
                _ = tokio::time::sleep(TRICKLE) => {
                    closed = stream.write_all(b" ").await.is_err();
                }
            }
        }
        attack.open.lock().unwrap().remove(&me);
        if closed {
            attack.dropped.lock().unwrap().push(since.elapsed());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_slow_webhook_clients_under_a_low_ulimit_hold_neither_healthz_nor_the_mail() {
    let world = harness::world_for(Backend::Redis).await;
    let (mut replica, port) = spawn_limited(&world, 120, &deadlines());
    wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    let attack = Arc::new(Attack::default());
    let attack_started = Instant::now();
    let stop = CancellationToken::new();
    let clients: Vec<_> = (0..SLOW_CLIENTS)
        .map(|me| tokio::spawn(slow_client(port, me, attack.clone(), stop.child_token())))
        .collect();
    common::wait_until(
        "a hundred slow clients have connected",
        Duration::from_secs(30),
        || async { attack.opened.load(Ordering::Relaxed) >= 100 },
    )
    .await;

    // Probes every half second while ticks send the backlog.
    let probed = Arc::new(AtomicU64::new(0));
    let probes = {
        let (stop, probed) = (stop.clone(), probed.clone());
        tokio::spawn(async move {
            let mut answers = Vec::new();
            while !stop.is_cancelled() {
                probed.fetch_add(1, Ordering::Relaxed);
                let asked = Instant::now();
                let answer = tokio::time::timeout(Duration::from_secs(2), get(port, "/healthz"))
                    .await
                    .ok()
                    .flatten()
                    .map(|(status, _)| status);
                answers.push((answer, asked.elapsed()));
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
            answers
        })
    };
    common::insert_overdue(world.pool(), 30).await;
    world.wait_for_mails(30).await;
    common::wait_until("ten probes were made", Duration::from_secs(30), || async {
        probed.load(Ordering::Relaxed) >= 10
    })
    .await;
    let limit = HEADER_TIMEOUT + BODY_TIMEOUT + Duration::from_secs(2);
    // Long enough that a connection kept past its deadlines would show.
    common::wait_until(
        "the attack has outlasted the deadlines twice",
        limit * 4,
        || async { attack_started.elapsed() >= limit * 2 },
    )
    .await;
    let oldest_open = attack.oldest_open();
    stop.cancel();
    let answers = probes.await.unwrap();
    for client in clients {
        client.await.unwrap();
    }
    replica.stop_gracefully().await;

    eprintln!(
        "{} connections opened, {} dropped by the server, {} probes, the slowest answered in {:?}",
        attack.opened.load(Ordering::Relaxed),
        attack.dropped().len(),
        answers.len(),
        answers
            .iter()
            .map(|(_, took)| *took)
            .max()
            .unwrap_or_default()
    );
    let failed: Vec<_> = answers.iter().filter(|(a, _)| *a != Some(200)).collect();
    assert!(answers.len() >= 10, "{answers:?}");
    assert!(
        failed.is_empty(),
        "/healthz did not answer 200 within 2 s: {failed:?} of {answers:?}"
    );
    assert!(
        attack.dropped().len() >= SLOW_CLIENTS,
        "too few connections dropped"
    );
    let longest = attack.dropped().into_iter().max().unwrap_or_default();
    assert!(
        longest <= limit,
        "a stalled connection lived {longest:?} (limit {limit:?})"
    );
    assert!(
        oldest_open <= limit,
        "a stalled connection was still open after {oldest_open:?}"
    );
    common::assert_no_duplicate_mail(&world.sink);
    let log = replica.log();
    assert!(!log.contains("Too many open files"), "{log}");
}

/// Reads from `stream` until the server closes it (or `limit` passes):
/// what it answered, and how long after `since` it closed (None: open).
async fn until_closed(
    mut stream: tokio::net::TcpStream,
    since: Instant,
    limit: Duration,
) -> (String, Option<Duration>) {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await;
    let closed = read.is_ok().then(|| since.elapsed());
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_a_stalled_body_and_an_idle_connection_are_each_closed_at_their_deadline() {
    let world = harness::world_for(Backend::Redis).await;
    let (mut replica, port) = spawn_limited(&world, 1024, &deadlines());
    wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    let connect = || tokio::net::TcpStream::connect(("127.0.0.1", port));
    let started = Instant::now();
    let mut endless = connect().await.unwrap();
    endless
        .write_all(b"POST /webhooks/bounces HTTP/1.1\r\nHost: x\r\nwebhook-signature: v1,x\r\n")
        .await
        .unwrap();
    let mut trickle = connect().await.unwrap();
    trickle
        .write_all(b"POST /webhooks/bounces HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nwebhook-id: m\r\nwebhook-timestamp: 1\r\nwebhook-signature: v1,x\r\n\r\n{")
        .await
        .unwrap();
    let mut idle = connect().await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();

    let wait = (HEADER_TIMEOUT + BODY_TIMEOUT) * 3;
    let (endless, trickle, idle) = tokio::join!(
        until_closed(endless, started, wait),
        until_closed(trickle, started, wait),
        until_closed(idle, started, wait),
    );
    replica.stop_gracefully().await;

    let slack = Duration::from_secs(2);
    let within =
        |closed: Option<Duration>, limit: Duration| closed.is_some_and(|c| c <= limit + slack);
    assert!(
        within(endless.1, HEADER_TIMEOUT),
        "headers that never end: {endless:?}"
    );
    assert!(
        within(trickle.1, BODY_TIMEOUT),
        "a body that stops: {trickle:?}"
    );
    assert!(trickle.0.starts_with("HTTP/1.1 408"), "{trickle:?}");
    assert!(
        within(idle.1, HEADER_TIMEOUT),
        "an idle kept-alive connection: {idle:?}"
    );
    assert!(idle.0.starts_with("HTTP/1.1 200"), "{idle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_webhook_listen_the_webhook_has_an_address_of_its_own_without_metrics_or_readyz() {
    let world = harness::world_for(Backend::Redis).await;
    let public = harness::free_port();
    let (mut replica, private) = spawn_limited(
        &world,
        1024,
        &[(
            "INVOICE_REMINDER__HTTP__WEBHOOK_LISTEN",
            format!("127.0.0.1:{public}"),
        )],
    );
    wait_for_status(private, "/healthz", 200, Duration::from_secs(15)).await;
    let status =
        |port: u16, path: &'static str| async move { get(port, path).await.map(|(s, _)| s) };
    let mut unsigned = tokio::net::TcpStream::connect(("127.0.0.1", public))
        .await
        .unwrap();
    unsigned
        .write_all(b"POST /webhooks/bounces HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let (refused, _) = until_closed(unsigned, Instant::now(), Duration::from_secs(10)).await;

    let on_public = [
        status(public, "/metrics").await,
        status(public, "/readyz").await,
        status(public, "/healthz").await,
    ];
    let webhook_on_private = status(private, "/webhooks/bounces").await;
    let metrics_on_private = status(private, "/metrics").await;
    replica.stop_gracefully().await;

    assert_eq!(on_public, [Some(404); 3]);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert_eq!(webhook_on_private, Some(404));
    assert_eq!(metrics_on_private, Some(200));
}
