//! The listener's request handling fuzzed with proptest: requests built
//! from arbitrary methods, paths, headers (the webhook's among them, with
//! numbers at the edges of `i64`), lengths, chunking and bodies, correctly
//! signed or not, and raw bytes, each on a connection of its own to a real
//! listener (the database and Redis unreachable). Every one ends with an
//! HTTP answer that is not a 500 (503 only from `/readyz` and the
//! webhook's database), or with the connection closed, and the listener
//! still answers `/healthz` afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::{AppState, Routes, app, listener};
use crate::config::Settings;
use crate::liveness::Liveness;
use crate::tick::context::Context;

/// How many requests are generated.
const CASES: u32 = 2_000;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn settings() -> Settings {
    let env = [
        ("DATABASE__URL", "postgres://nobody@127.0.0.1:1/none"),
        ("REDIS__URL", "redis://127.0.0.1:1"),
        ("HTTP__LISTEN", "127.0.0.1:0"),
        ("HTTP__WEBHOOK_SECRET", SECRET),
        ("HTTP__WEBHOOK_BASIC_AUTH", "postmark:pw"),
        ("DATABASE__CONNECT_TIMEOUT", "100ms"),
        ("REDIS__TIMEOUT", "100ms"),
        ("HTTP__HEADER_READ_TIMEOUT", "200ms"),
        ("HTTP__BODY_READ_TIMEOUT", "200ms"),
        ("HTTP__MAX_HEADER_BYTES", "4096"),
    ];
    Settings::load_with(&env).unwrap()
}

/// Text from bytes in `range` (so names and methods stay tokens or not,
/// as drawn).
fn text(range: std::ops::Range<u8>, len: std::ops::Range<usize>) -> BoxedStrategy<String> {
    vec(range, len)
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
        .boxed()
}

fn header_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        2 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        1 => Just(i64::MIN.to_string().into_bytes()),
        1 => Just(i64::MAX.to_string().into_bytes()),
        1 => Just(b"chunked".to_vec()),
        1 => Just(b"v1,AAAA v1,".to_vec()),
        1 => Just(b"Basic cG9zdG1hcms6cHc=".to_vec()),
        1 => Just(b"100-continue".to_vec()),
        4 => vec(0x20u8..0x7f, 0..60),
        1 => vec(any::<u8>(), 0..60),
    ]
    .boxed()
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        2 => Just("webhook-signature".to_owned()),
        2 => Just("webhook-id".to_owned()),
        2 => Just("webhook-timestamp".to_owned()),
        1 => Just("content-length".to_owned()),
        1 => Just("transfer-encoding".to_owned()),
        1 => Just("authorization".to_owned()),
        1 => Just("connection".to_owned()),
        1 => Just("expect".to_owned()),
        2 => text(0x21..0x7f, 0..20),
        1 => text(0x00..0xff, 0..20),
    ];
    (name, header_value())
}

/// One request as bytes.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        2 => Just("GET".to_owned()),
        4 => Just("POST".to_owned()),
        1 => Just("HEAD".to_owned()),
        1 => text(0x21..0x7f, 0..10),
    ];
    let path = prop_oneof![
        1 => Just("/healthz".to_owned()),
        1 => Just("/readyz".to_owned()),
        1 => Just("/metrics".to_owned()),
        5 => Just(super::webhook::PATH.to_owned()),
        1 => text(0x21..0x7f, 0..40).prop_map(|p| format!("/{p}")),
        1 => text(0x00..0xff, 0..40),
    ];
    let structured = (
        method,
        path,
        vec(header(), 0..6),
        vec(any::<u8>(), 0..400),
        0u8..4,
        any::<i16>(),
    )
        .prop_map(|(method, path, headers, body, framing, skew)| {
            let mut out = format!("{method} {path} HTTP/1.1\r\nHost: fuzz\r\n").into_bytes();
            if framing == 3 {
                // Correctly signed, near our clock (or not), any body.
                let now = chrono::Utc::now().timestamp();
                let at = now.saturating_add(i64::from(skew));
                let body_text = String::from_utf8_lossy(&body);
                if let Ok(sig) = standardwebhooks::Webhook::new(SECRET)
                    .and_then(|w| w.sign("msg_fuzz", at, body_text.as_bytes()))
                {
                    out.extend(
                        format!("webhook-id: msg_fuzz\r\nwebhook-timestamp: {at}\r\nwebhook-signature: {sig}\r\n")
                            .into_bytes(),
                    );
                }
            }
            for (name, value) in headers {
                out.extend(name.into_bytes());
                out.extend(b": ");
                out.extend(value);
                out.extend(b"\r\n");
            }
            match framing {
                0 => {}
                1 => out.extend(format!("content-length: {}\r\n", body.len()).into_bytes()),
                _ => out.extend(b"transfer-encoding: chunked\r\n"),
            }
            out.extend(b"\r\n");
            if framing == 2 {
                out.extend(format!("{:x}\r\n", body.len()).into_bytes());
                out.extend(&body);
                out.extend(b"\r\n0\r\n\r\n");
            } else {
                out.extend(&body);
            }
            out
        });
    prop_oneof![1 => vec(any::<u8>(), 0..600), 4 => structured]
}

/// Sends `bytes` on a new connection and reads until the server closes:
/// the status, or None when it closed without answering.
async fn exchange(port: u16, bytes: &[u8], half_close: bool) -> Result<Option<u16>, String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.write_all(bytes).await;
    if half_close {
        let _ = stream.shutdown().await;
    }
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    if read.is_err() {
        return Err("the server neither answered nor closed within 10 s".into());
    }
    if answer.is_empty() {
        return Ok(None);
    }
    let head = String::from_utf8_lossy(&answer[..answer.len().min(12)]).into_owned();
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {head:?}"))?;
    Ok(Some(status))
}

#[test]
fn any_request_gets_an_answer_or_a_close_never_a_500_and_the_listener_stays_up() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let port = runtime.block_on(async {
        let settings = settings();
        let pool = crate::db::connect_lazy(&settings);
        let ctx = Arc::new(Context::new(settings, pool).unwrap());
        let liveness = Liveness::new(Duration::from_secs(60));
        liveness.set_loop_running(true);
        let limits = listener::Limits::from_settings(&ctx.settings.http);
        let state = AppState::new(ctx.clone(), liveness);
        let app = app(&state, Routes::Health { with_webhook: true });
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        tokio::spawn(listener::serve(
            tcp,
            app,
            limits,
            ctx.metrics.clone(),
            stop.clone(),
        ));
        port
    });
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u64>::new());
    let closed = AtomicU64::new(0);
    let started = std::time::Instant::now();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(CASES));
    let ran = runner.run(&(request(), any::<bool>()), |(bytes, half_close)| {
        let got = runtime.block_on(exchange(port, &bytes, half_close));
        match got {
            Ok(Some(status)) => {
                *statuses.lock().unwrap().entry(status).or_default() += 1;
                prop_assert!(
                    status < 500 || status == 503,
                    "{status} for {:?}",
                    String::from_utf8_lossy(&bytes)
                );
            }
            Ok(None) => {
                closed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => prop_assert!(false, "{e} for {:?}", String::from_utf8_lossy(&bytes)),
        }
        Ok(())
    });
    let alive = runtime.block_on(exchange(
        port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        false,
    ));
    stop.cancel();
    println!(
        "{CASES} requests in {:?}: answers by status {:?}, {} closed without an answer",
        started.elapsed(),
        statuses.lock().unwrap(),
        closed.load(Ordering::Relaxed),
    );
    ran.unwrap();
    assert_eq!(alive, Ok(Some(200)));
}
