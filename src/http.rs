//! `/healthz`, `/readyz` and `/metrics` over HTTP, when `http.listen` is set.
//!
//! * `/healthz` (liveness) never touches the database or Redis: 200 while
//!   the scheduler loop runs and no tick is past `schedule.max_tick_duration`.
//! * `/readyz` (readiness): 200 when the database and the lock backend both
//!   answer within [`READY_TIMEOUT`]; 503 naming the one that does not.
//! * `/metrics`: the Prometheus (OpenMetrics) exposition of [`Metrics`].
//! * `POST /webhooks/bounces` ([`webhook`]), when `http.webhook_secret` or
//!   `http.webhook_basic_auth` is set: bounces onto the suppression list.
//!
//! Failures answer `{"status":"fail","reason":"..."}` with status 503.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::liveness::Liveness;
use crate::tick::context::Context;

mod bounce;
pub mod webhook;

/// How long each readiness check may take.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
struct AppState {
    ctx: Arc<Context>,
    liveness: Liveness,
    /// How the bounce webhook checks its callers; None: the route is off.
    webhook: Option<Arc<webhook::WebhookAuth>>,
}

/// Binds `addr` now (so a port in use is reported at start-up), then serves
/// until `stop` is cancelled.
pub async fn bind(
    addr: SocketAddr,
    ctx: Arc<Context>,
    liveness: Liveness,
    stop: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).await?;
    let webhook = webhook::WebhookAuth::from_settings(&ctx.settings.http);
    let mut app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    if webhook.is_some() {
        app = app.route(webhook::PATH, axum::routing::post(webhook::bounces));
        tracing::info!(%addr, "serving /healthz, /readyz, /metrics and POST {}", webhook::PATH);
    } else {
        tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    }
    let app = app.with_state(AppState {
        ctx,
        liveness,
        webhook,
    });
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the HTTP listener failed");
        }
    }))
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

async fn readyz(State(state): State<AppState>) -> Response {
    let ctx = &state.ctx;
    let database = async {
        match tokio::time::timeout(READY_TIMEOUT, crate::db::ping(&ctx.db)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("database: {e}")),
            Err(_) => Err(format!(
                "database: no answer within {}",
                humantime::format_duration(READY_TIMEOUT)
            )),
        }
    };
    let lock = async {
        match tokio::time::timeout(READY_TIMEOUT, ctx.lock.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("lock backend: {e}")),
            Err(_) => Err(format!(
                "lock backend: no answer within {}",
                humantime::format_duration(READY_TIMEOUT)
            )),
        }
    };
    let (database, lock) = tokio::join!(database, lock);
    let failures: Vec<String> = [database, lock]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if failures.is_empty() {
        ok()
    } else {
        fail(failures.join("; "))
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
