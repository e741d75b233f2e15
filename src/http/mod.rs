//! `/healthz`, `/readyz` and `/metrics` over HTTP, when `http.listen` is
//! set, and the webhooks: bounces when `http.webhook_secret` is set,
//! payment signals when a `payments` secret is.
//!
//! * `/healthz` (liveness) never touches the database or Redis: 200 while
//!   the scheduler loop runs and no tick is past `schedule.max_tick_duration`.
//! * `/readyz` (readiness): 200 when the database and the lock backend both
//!   answer within [`READY_TIMEOUT`]; 503 with a fixed reason per
//!   dependency (`database: unavailable`, `lock: unavailable`). The error
//!   itself (which can name hosts and users) goes to the log only, once
//!   when a dependency becomes unavailable.
//! * `/metrics`: the Prometheus (OpenMetrics) exposition of [`Metrics`].
//! * `POST /webhooks/bounces` ([`webhook`]): bounces onto the suppression
//!   list; on `http.webhook_listen` when it is set (then that listener
//!   serves nothing else, and the one on `http.listen` no webhook), else on
//!   `http.listen` with the rest.
//! * `POST /webhooks/stripe` and `POST /webhooks/payments` ([`payments`]):
//!   payment signals that hold reminders, on the same listener as the
//!   bounce webhook, each only when its secret is set.
//!
//! Every listener has the limits of [`listener`]. Failures answer
//! `{"status":"fail","reason":"..."}` with status 503.
//!
//! [`Metrics`]: crate::metrics::Metrics

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::liveness::Liveness;
use crate::tick::context::Context;

mod body;
mod bounce;
pub mod files;
#[cfg(test)]
mod fuzz;
pub mod listener;
pub mod payments;
pub mod signature;
mod slots;
mod stripe;
mod stripe_events;
pub mod stripe_lookup;
pub mod webhook;

/// How long each readiness check may take.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct AppState {
    ctx: Arc<Context>,
    liveness: Liveness,
    /// How the bounce webhook checks its callers; None: the route is off.
    webhook: Option<Arc<webhook::WebhookAuth>>,
    /// Which dependencies `/readyz` last found unavailable, so the cause
    /// is logged once per outage, not once per probe.
    unready: Arc<Unready>,
    /// Webhook bodies being read at once, at most half of
    /// `http.max_connections` (see [`webhook`]).
    webhook_reads: Arc<tokio::sync::Semaphore>,
    /// Lookups at Stripe's API, when `payments.stripe_api_key` is set.
    lookups: Option<stripe_lookup::Lookups>,
}

#[derive(Default)]
struct Unready {
    database: AtomicBool,
    lock: AtomicBool,
}

/// A listener that could not be bound: the key that names its address.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {key} = {addr}")]
pub struct BindError {
    pub key: &'static str,
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds every configured listener now (so a port in use is reported at
/// start-up), then serves until `stop` is cancelled; None when
/// `http.listen` and `http.webhook_listen` are both off.
pub async fn bind(
    ctx: Arc<Context>,
    liveness: Liveness,
    stop: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, BindError> {
    let http = &ctx.settings.http;
    let (listen, webhook_listen) = (http.listen, http.webhook_listen);
    let limits = listener::Limits::from_settings(http);
    let mut state = AppState::new(ctx.clone(), liveness);
    if !ctx.settings.payments.stripe_secrets.is_empty() {
        state.lookups = stripe_lookup::Lookups::start(
            &ctx.settings.payments,
            ctx.db.clone(),
            ctx.metrics.clone(),
            stop.clone(),
        );
    }
    let webhook_on = state.webhook.is_some() || ctx.settings.payments.enabled();
    let mut served = Vec::new();
    if let Some(addr) = listen {
        let with_webhook = webhook_on && webhook_listen.is_none();
        if with_webhook {
            tracing::info!(%addr, "serving /healthz, /readyz, /metrics and the webhooks");
        } else {
            tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
        }
        let app = app(&state, Routes::Health { with_webhook });
        served.push((bind_one("http.listen", addr)?, app));
    }
    if let Some(addr) = webhook_listen.filter(|_| webhook_on) {
        tracing::info!(%addr, "serving the webhooks (http.webhook_listen)");
        let app = app(&state, Routes::WebhookOnly);
        served.push((bind_one("http.webhook_listen", addr)?, app));
    }
    if served.is_empty() {
        return Ok(None);
    }
    let tasks: Vec<_> = served
        .into_iter()
        .map(|(tcp, app)| {
            let metrics = ctx.metrics.clone();
            tokio::spawn(listener::serve(tcp, app, limits, metrics, stop.clone()))
        })
        .collect();
    Ok(Some(tokio::spawn(async move {
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "an HTTP listener failed");
            }
        }
    })))
}

/// What one listener serves.
#[derive(Debug, Clone, Copy)]
enum Routes {
    /// `/healthz`, `/readyz`, `/metrics`, and the webhook when it is on
    /// and has no listener of its own.
    Health { with_webhook: bool },
    /// The webhook alone (`http.webhook_listen`).
    WebhookOnly,
}

fn app(state: &AppState, routes: Routes) -> Router {
    let app = match routes {
        Routes::Health { with_webhook } => {
            let app = Router::new()
                .route("/healthz", get(healthz))
                .route("/readyz", get(readyz))
                .route("/metrics", get(metrics));
            if with_webhook {
                webhooks(state, app)
            } else {
                app
            }
        }
        Routes::WebhookOnly => webhooks(state, Router::new()),
    };
    app.with_state(state.clone())
}

/// `app` with each webhook route whose secret is set.
fn webhooks(state: &AppState, mut app: Router<AppState>) -> Router<AppState> {
    let payments = &state.ctx.settings.payments;
    if state.webhook.is_some() {
        app = app.route(webhook::PATH, post(webhook::bounces));
    }
    if !payments.stripe_secrets.is_empty() {
        app = app.route(payments::STRIPE_PATH, post(payments::stripe));
    }
    if payments.secret.is_some() {
        app = app.route(payments::SIGNALS_PATH, post(payments::signals));
    }
    app
}

impl AppState {
    fn new(ctx: Arc<Context>, liveness: Liveness) -> Self {
        let http = &ctx.settings.http;
        let reads = usize::try_from(http.max_connections / 2).unwrap_or(usize::MAX);
        Self {
            webhook: webhook::WebhookAuth::from_settings(http),
            webhook_reads: Arc::new(tokio::sync::Semaphore::new(reads.max(1))),
            ctx,
            liveness,
            unready: Arc::default(),
            lookups: None,
        }
    }
}

/// The system's accept queue of each listener: where new connections wait
/// while a full listener admits none (bounded; the system may lower it to
/// `net.core.somaxconn`).
const BACKLOG: u32 = 1024;

fn bind_one(key: &'static str, addr: SocketAddr) -> Result<TcpListener, BindError> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    };
    socket
        .and_then(|socket| {
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            socket.listen(BACKLOG)
        })
        .map_err(|source| BindError { key, addr, source })
}

fn ok() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}

fn fail(reason: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({"status": "fail", "reason": reason})),
    )
        .into_response()
}

async fn healthz(State(state): State<AppState>) -> Response {
    match state.liveness.check() {
        Ok(()) => ok(),
        Err(failure) => fail(failure.to_string()),
    }
}

/// What `/readyz` checks, by the name its reason gives it.
#[derive(Debug, Clone, Copy)]
enum Dependency {
    Database,
    Lock,
}

impl Dependency {
    fn name(self) -> &'static str {
        match self {
            Self::Database => "database",
            Self::Lock => "lock",
        }
    }

    /// The reason `/readyz` gives: fixed, so it carries nothing of the
    /// error (hosts, users, addresses).
    fn reason(self) -> &'static str {
        match self {
            Self::Database => "database: unavailable",
            Self::Lock => "lock: unavailable",
        }
    }
}

/// Logs a dependency's change of readiness: the cause once when it
/// becomes unavailable, a line when it is back.
fn note_readiness(state: &AppState, dependency: Dependency, failure: Option<String>) {
    let was_unready = match dependency {
        Dependency::Database => &state.unready.database,
        Dependency::Lock => &state.unready.lock,
    };
    match failure {
        Some(error) => {
            if !was_unready.swap(true, Ordering::Relaxed) {
                tracing::warn!(dependency = dependency.name(), %error, "/readyz: unavailable");
            } else {
                tracing::debug!(dependency = dependency.name(), %error, "/readyz: still unavailable");
            }
        }
        None => {
            if was_unready.swap(false, Ordering::Relaxed) {
                tracing::info!(dependency = dependency.name(), "/readyz: available again");
            }
        }
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    let ctx = &state.ctx;
    let within = |e: Option<String>| {
        e.unwrap_or_else(|| {
            format!(
                "no answer within {}",
                humantime::format_duration(READY_TIMEOUT)
            )
        })
    };
    let database = async {
        match tokio::time::timeout(READY_TIMEOUT, crate::db::ping(&ctx.db)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(within(Some(e.to_string()))),
            Err(_) => Some(within(None)),
        }
    };
    let lock = async {
        match tokio::time::timeout(READY_TIMEOUT, ctx.lock.ping()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(within(Some(e.to_string()))),
            Err(_) => Some(within(None)),
        }
    };
    let (database, lock) = tokio::join!(database, lock);
    let mut reasons = Vec::new();
    for (dependency, failure) in [(Dependency::Database, database), (Dependency::Lock, lock)] {
        if failure.is_some() {
            reasons.push(dependency.reason());
        }
        note_readiness(&state, dependency, failure);
    }
    if reasons.is_empty() {
        ok()
    } else {
        fail(reasons.join("; "))
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let ctx = &state.ctx;
    ctx.metrics.set_deferred_writes(ctx.deferred.len());
    match ctx.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
