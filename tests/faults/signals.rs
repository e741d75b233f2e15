//! What the payment-signal tests share: a replica serving the payment
//! routes, Stripe events signed as Stripe signs them, generic signals
//! signed by the Standard Webhooks scheme, ticks run with `run-once`, and
//! what `explain` says of an invoice's hold.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{self, World};
use crate::harness::{self, Replica, ReplicaOptions};
use crate::http::wait_for_status;
use crate::webhook::{now, signed};

/// A Stripe endpoint secret of our own.
pub fn stripe_secret() -> String {
    format!("whsec_{}", uuid::Uuid::new_v4().simple())
}

/// A replica serving the payment routes on a port of its own, with the
/// Stripe secrets `stripe` (several: a rotation) and the generic signal's
/// secret `generic`, and `env` beside them.
pub async fn spawn_signals_with(
    world: &mut World,
    stripe: &[&str],
    generic: &str,
    env: Vec<(String, String)>,
) -> (Replica, u16) {
    // A schedule that does not fire while the test runs.
    world.set("schedule.cron", "0 0 0 1 1 *");
    let port = harness::free_port();
    let list = stripe
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut all = vec![
        (
            "INVOICE_REMINDER__HTTP__LISTEN".to_owned(),
            format!("127.0.0.1:{port}"),
        ),
        (
            "INVOICE_REMINDER__PAYMENTS__STRIPE_SECRETS".to_owned(),
            format!("[{list}]"),
        ),
        (
            "INVOICE_REMINDER__PAYMENTS__SECRET".to_owned(),
            generic.to_owned(),
        ),
    ];
    all.extend(env);
    let replica = Replica::spawn(
        world,
        "payments",
        ReplicaOptions {
            env: all,
            ..ReplicaOptions::default()
        },
    );
    wait_for_status(port, "/healthz", 200, Duration::from_secs(15)).await;
    (replica, port)
}

/// [`spawn_signals_with`] and nothing beside.
pub async fn spawn_signals(world: &mut World, stripe: &[&str], generic: &str) -> (Replica, u16) {
    spawn_signals_with(world, stripe, generic, Vec::new()).await
}

/// `POST path` with `headers` and `body`: (status, the JSON answer).
pub async fn post(
    port: u16,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, Value) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<hyper::body::Bytes>>();
    let mut request = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(http_body_util::Full::new(hyper::body::Bytes::from(
            body.to_vec(),
        )))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A Stripe event of `kind` about `object`, created at `created`, in the
/// shape of API version `version` (None: no `api_version`).
pub fn versioned(
    id: &str,
    kind: &str,
    created: i64,
    version: Option<&str>,
    object: Value,
) -> Vec<u8> {
    let mut e = json!({"id": id, "object": "event", "type": kind, "created": created,
                       "livemode": false, "pending_webhooks": 1,
                       "request": {"id": null, "idempotency_key": null},
                       "data": {"object": object}});
    if let Some(version) = version {
        e["api_version"] = json!(version);
    }
    e.to_string().into_bytes()
}

/// A Stripe event without `api_version`.
pub fn event(id: &str, kind: &str, created: i64, object: Value) -> Vec<u8> {
    versioned(id, kind, created, None, object)
}

/// A payment intent for invoice `invoice` (our id in its metadata).
pub fn intent(pi: &str, invoice: i64) -> Value {
    json!({"id": pi, "object": "payment_intent", "metadata": {"invoice_id": invoice.to_string()}})
}

/// `Stripe-Signature` for `body`, signed with `secret` at `t`.
pub fn stripe_signed(secret: &str, t: i64, body: &[u8]) -> Vec<(String, String)> {
    let mut message = t.to_string().into_bytes();
    message.push(b'.');
    message.extend_from_slice(body);
    let mac = hmac_sha256::HMAC::mac(&message, secret.as_bytes());
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    vec![("Stripe-Signature".to_owned(), format!("t={t},v1={hex}"))]
}

/// A signed Stripe event posted: its status and outcome.
pub async fn stripe(port: u16, secret: &str, body: &[u8]) -> (u16, String) {
    let (status, answer) = post(
        port,
        "/webhooks/stripe",
        &stripe_signed(secret, now(), body),
        body,
    )
    .await;
    (status, answer["outcome"].as_str().unwrap_or("").to_owned())
}

/// A generic signal `word` for `invoice` at `at`, signed as message `id`:
/// its status and outcome.
pub async fn generic(
    port: u16,
    secret: &str,
    id: &str,
    invoice: i64,
    word: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> (u16, String) {
    let body = json!({"invoice_id": invoice.to_string(), "signal": word, "at": at.to_rfc3339()})
        .to_string();
    let (status, answer) = post(
        port,
        "/webhooks/payments",
        &signed(secret, id, now(), body.as_bytes()),
        body.as_bytes(),
    )
    .await;
    (status, answer["outcome"].as_str().unwrap_or("").to_owned())
}

/// One `run-once` tick; the invoices it mailed.
pub async fn tick(world: &World) -> Vec<i64> {
    let before = world.sink.count();
    let out = common::cli(world, &["run-once"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    world.sink.received()[before..]
        .iter()
        .filter_map(|m| m.invoice_id())
        .collect()
}

/// `explain --invoice <invoice> --json`.
pub async fn explain(world: &World, invoice: i64) -> Value {
    let out = common::cli(
        world,
        &["explain", "--invoice", &invoice.to_string(), "--json"],
    )
    .await;
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("explain's JSON: {}", String::from_utf8_lossy(&out.stderr)))
}

/// The state of the hold in force on `invoice`, as `explain` says it.
pub async fn hold(world: &World, invoice: i64) -> Option<String> {
    explain(world, invoice).await["payment_hold"]["state"]
        .as_str()
        .map(str::to_owned)
}
