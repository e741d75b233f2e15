//! One HTTP/1 listener that no client can hold open: hyper's connection
//! builder for the protocol, and our own accept loop for the limits.
//!
//! Guarantees, per listener:
//! * At most `http.max_connections` connections are open (one more for
//!   the instant between accepting a connection and admitting it), so the
//!   listener can never take the file descriptors the ticks need.
//! * At the cap, a new connection takes the place of one that has stalled
//!   waiting for its request ([`slots`](super::slots)); when none has, the
//!   loop stops accepting until a connection closes or stalls, and new
//!   connections wait in the system's accept queue (bounded by its
//!   backlog), in the order they came. Nothing is queued by us, and a
//!   connection being answered is never dropped. So `/healthz` is answered
//!   while slow clients fill the listener: the stalled give way, the rest
//!   are served in turn; slow webhook bodies take at most half of the cap
//!   (the webhook answers 503 beyond, see `webhook`).
//! * A request's start line and headers must arrive within
//!   `http.header_read_timeout` (so must the next request on a kept-alive
//!   connection), at most `http.max_header_bytes` of them (431) and 64
//!   header fields; a webhook body within `http.body_read_timeout`
//!   (the webhook answers 408).

use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use super::slots::{Admission, STALLED, Slot, Slots};
use crate::config::HttpSettings;
use crate::metrics::Metrics;

/// How long the accept loop waits after the system refused it a
/// connection (out of file descriptors): the loop must not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How long a connection replaced at the cap may take to close before the
/// new one is served anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How long a connection may finish its request after the worker was told
/// to stop.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The most header fields of one request.
const MAX_HEADERS: usize = 64;

/// A listener's limits, from `[http]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
}

impl Limits {
    pub fn from_settings(http: &HttpSettings) -> Self {
        Self {
            max_connections: usize::try_from(http.max_connections).unwrap_or(usize::MAX),
            header_read_timeout: http.header_read_timeout,
            max_header_bytes: usize::try_from(http.max_header_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// Serves `app` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let slots = Slots::new(limits.max_connections);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_headers(MAX_HEADERS);
    let mut warned_full = false;
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "the HTTP listener could not accept a connection");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    }
                }
            },
        };
        let mut waited = false;
        let slot = loop {
            let freed = slots.freed();
            match slots.admit() {
                Admission::Free(slot) => break slot,
                Admission::Replacing(slot, closed) => {
                    metrics.http_listener_full("replaced");
                    warn_full(&mut warned_full, limits.max_connections);
                    let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
                    break slot;
                }
                Admission::Wait(until) => {
                    if !waited {
                        waited = true;
                        metrics.http_listener_full("waited");
                        warn_full(&mut warned_full, limits.max_connections);
                    }
                    let until = until.unwrap_or_else(|| Instant::now() + STALLED);
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = freed => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
            }
        };
        let connection = builder.clone();
        let (app, stop) = (app.clone(), stop.clone());
        tokio::spawn(async move {
            serve_connection(&connection, (stream, peer), app, slot, &stop).await;
        });
    }
}

/// Logs once per listener that the cap was reached (the metric counts
/// every time).
fn warn_full(warned: &mut bool, max_connections: usize) {
    if !*warned {
        *warned = true;
        tracing::warn!(
            max_connections,
            "the HTTP listener is full (http.max_connections): stalled connections give way to new ones, or new ones wait their turn; see invoice_reminder_http_listener_full_total"
        );
    }
}

/// Serves one connection until it ends, is replaced, or the worker stops;
/// the slot is given back only once the socket is closed.
async fn serve_connection(
    builder: &hyper::server::conn::http1::Builder,
    (stream, peer): (TcpStream, std::net::SocketAddr),
    app: Router,
    mut slot: Slot,
    stop: &CancellationToken,
) {
    let busy = slot.busy_handle();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The client's address, for handlers that key on it (the console's sign-in throttle).
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        let answering = busy.enter();
        let app = app.clone();
        async move {
            let response = app.oneshot(request).await;
            drop(answering);
            response
        }
    });
    let replaced = slot.replaced();
    {
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection, replaced);
        tokio::select! {
            _ = connection.as_mut() => {}
            _ = replaced => {}
            _ = stop.cancelled() => {
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(STOP_GRACE, connection).await;
            }
        }
    }
    drop(slot);
}
