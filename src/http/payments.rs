//! `POST /webhooks/stripe` and `POST /webhooks/payments`: payment signals
//! that hold an invoice's reminders before the billing database says it is
//! paid (docs/own-invoices.md, "Payment signals"). Each route is served on
//! the webhook listener only when its secret is set.
//!
//! Guarantees: nothing is stored unless the request is signed, fresh
//! (`payments.tolerance`) and well-formed; the answers are 401 for a bad
//! or missing signature or a timestamp outside the tolerance, 400 for a
//! body that is not the event it should be, 413/408/503 from the
//! listener's limits (`body`), and 2xx once the signal is stored or was
//! seen before (same event id). A signed event it does not act on, or
//! one that names no invoice, gets 2xx and is only counted: a 4xx would
//! make the provider retry it for days. Every request is counted by kind
//! and outcome (`invoice_reminder_payment_signals_total`); no secret is
//! ever logged or answered.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use secrecy::ExposeSecret as _;
use serde_json::json;

use super::AppState;
use super::body::{self, Unread};
use super::signature::{self, Refused};
use super::stripe;
use super::stripe_events::{self, Ask, Event};
use crate::db;
use crate::domain::{InvoiceId, PaymentSignal, Signal, SignalOutcome};

/// Stripe's route.
pub const STRIPE_PATH: &str = "/webhooks/stripe";
/// The generic signal's route.
pub const SIGNALS_PATH: &str = "/webhooks/payments";

/// How a request ended, when it ended before a signal was stored.
struct Answer {
    status: StatusCode,
    outcome: &'static str,
    reason: String,
}

impl Answer {
    fn new(status: StatusCode, outcome: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status,
            outcome,
            reason: reason.into(),
        }
    }

    fn refused(refused: Refused) -> Self {
        match refused {
            Refused::Stale => Self::new(StatusCode::UNAUTHORIZED, "stale", refused.reason()),
            Refused::Unauthorized(r) => Self::new(StatusCode::UNAUTHORIZED, "unauthorized", r),
            Refused::BadRequest(r) => Self::new(StatusCode::BAD_REQUEST, "bad_request", r),
        }
    }

    fn unread(unread: Unread) -> Self {
        let (status, outcome) = match unread {
            Unread::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            Unread::Timeout => (StatusCode::REQUEST_TIMEOUT, "timeout"),
            Unread::Broken => (StatusCode::BAD_REQUEST, "bad_request"),
            Unread::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        };
        Self::new(status, outcome, unread.reason())
    }

    fn bad_request(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", reason)
    }
}

/// `POST /webhooks/stripe`.
pub(super) async fn stripe(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let read = async {
        let Some(signature) = headers.get(stripe::HEADER).and_then(|v| v.to_str().ok()) else {
            return Err(Answer::refused(Refused::Unauthorized(
                "Stripe-Signature is missing",
            )));
        };
        let bytes = body::read(&state, body, body::MAX_PAYMENT_BODY_BYTES)
            .await
            .map_err(Answer::unread)?;
        let payments = &state.ctx.settings.payments;
        stripe::verify(
            &payments.stripe_secrets,
            signature,
            &bytes,
            signature::now(),
            payments.tolerance.as_secs(),
        )
        .map_err(Answer::refused)?;
        let path: Vec<&str> = payments.invoice_key_path().collect();
        stripe_events::read(&bytes, &path).map_err(Answer::bad_request)
    };
    match read.await {
        Ok(Event::Signal(signal, ask)) => store(&state, &signal, ask).await,
        Ok(Event::Ignored(why)) => {
            tracing::info!(reason = %why, "Stripe event ignored");
            answer(&state, "none", Answer::new(StatusCode::OK, "ignored", why))
        }
        Err(refusal) => answer(&state, "none", refusal),
    }
}

/// The generic signal's body.
#[derive(Debug, serde::Deserialize)]
struct Generic {
    invoice_id: String,
    signal: String,
    at: DateTime<Utc>,
}

/// `POST /webhooks/payments`.
pub(super) async fn signals(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let read = async {
        if !headers.contains_key(standardwebhooks::HEADER_WEBHOOK_SIGNATURE) {
            return Err(Answer::refused(Refused::Unauthorized(
                "webhook-signature is missing",
            )));
        }
        let bytes = body::read(&state, body, body::MAX_PAYMENT_BODY_BYTES)
            .await
            .map_err(Answer::unread)?;
        let payments = &state.ctx.settings.payments;
        // Validated at start-up: only a secret that decodes gets here.
        let signer = payments
            .secret
            .as_ref()
            .and_then(|s| standardwebhooks::Webhook::new(s.expose_secret().trim()).ok())
            .ok_or_else(|| Answer::refused(Refused::Unauthorized("the route is off")))?;
        let id = signature::check(
            &signer,
            &headers,
            &bytes,
            signature::now(),
            payments.tolerance.as_secs(),
        )
        .map_err(Answer::refused)?;
        let generic: Generic = serde_json::from_slice(&bytes).map_err(|e| {
            Answer::bad_request(format!(
                "the body is not {{\"invoice_id\", \"signal\", \"at\"}}: {e}"
            ))
        })?;
        let signal = Signal::parse(&generic.signal).ok_or_else(|| {
            Answer::bad_request("\"signal\" must be paid, pending, disputed or released")
        })?;
        let invoice = generic.invoice_id.trim();
        if invoice.is_empty() || invoice.len() > signature::MAX_ID_BYTES {
            return Err(Answer::bad_request(
                "\"invoice_id\" is empty or longer than 256 bytes",
            ));
        }
        Ok(PaymentSignal {
            provider: "payments",
            event_id: id,
            signal: Some(signal),
            invoice_id: Some(InvoiceId::from(invoice)),
            object_id: String::new(),
            refs: Vec::new(),
            links: Vec::new(),
            at: generic.at,
        })
    };
    match read.await {
        Ok(signal) => store(&state, &signal, None).await,
        Err(refusal) => answer(&state, "none", refusal),
    }
}

/// Stores `signal`: 200 with what it did, 400 for a time further ahead
/// than `payments.tolerance` (nothing stored), or 503 when the database
/// did not take it (the provider retries). A signal that finds no invoice
/// queues `ask` at Stripe's API (when a key is set), only once it is
/// stored: a lookup never delays the answer.
async fn store(state: &AppState, signal: &PaymentSignal, ask: Option<Ask>) -> Response {
    let kind = signal.signal.map_or("link", Signal::label);
    let payments = &state.ctx.settings.payments;
    if ahead(signal.at, payments.tolerance) {
        return answer(
            state,
            kind,
            Answer::bad_request(
                "the signal's time is further ahead of our clock than payments.tolerance",
            ),
        );
    }
    match db::payments::record(&state.ctx.db, signal, payments.pending_hold).await {
        Ok(recorded) => {
            let outcome = recorded.outcome;
            if outcome == SignalOutcome::Unlinked {
                if let (Some(ask), Some(lookups)) = (ask, &state.lookups) {
                    lookups.ask(ask);
                }
                tracing::warn!(
                    provider = signal.provider,
                    event = %signal.event_id,
                    kind,
                    object = %signal.object_id,
                    "payment signal names no invoice known yet; kept, it applies when a later event links its objects (see docs/own-invoices.md, \"Unlinked signals\")"
                );
            } else {
                tracing::info!(
                    provider = signal.provider,
                    event = %signal.event_id,
                    kind,
                    object = %signal.object_id,
                    invoice = signal.invoice_id.as_ref().map(|i| i.as_str()).unwrap_or(""),
                    outcome = outcome.label(),
                    linked = recorded.linked,
                    "payment signal"
                );
            }
            answer(
                state,
                kind,
                Answer::new(StatusCode::OK, outcome.label(), ""),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "a payment signal could not be stored; the sender will retry");
            answer(
                state,
                kind,
                Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "error",
                    "the database is not available; retry later",
                ),
            )
        }
    }
}

/// Whether `at` is further ahead of our clock than `tolerance`.
fn ahead(at: DateTime<Utc>, tolerance: std::time::Duration) -> bool {
    let latest = chrono::Duration::from_std(tolerance)
        .ok()
        .and_then(|t| Utc::now().checked_add_signed(t));
    latest.is_none_or(|latest| at > latest)
}

fn answer(state: &AppState, kind: &'static str, answer: Answer) -> Response {
    state.ctx.metrics.payment_signal(kind, answer.outcome);
    let body = if answer.status.is_success() {
        json!({"status": "ok", "outcome": answer.outcome})
    } else {
        json!({"status": "fail", "outcome": answer.outcome, "reason": answer.reason})
    };
    if matches!(answer.outcome, "too_large" | "timeout" | "busy") {
        // The rest of the body is not waited for.
        return (
            answer.status,
            [(header::CONNECTION, "close")],
            axum::Json(body),
        )
            .into_response();
    }
    (answer.status, axum::Json(body)).into_response()
}
