//! `POST /webhooks/bounces`: bounces, complaints and unsubscribes from the
//! mail provider, added to the suppression list so the next reminder to
//! that address is not sent.
//!
//! Two ways in, each off until configured:
//! * **Standard Webhooks** (`http.webhook_secret`): `webhook-id`,
//!   `webhook-timestamp` and `webhook-signature`, checked by
//!   [`signature`](super::signature) (a timestamp more than 5 minutes off:
//!   401, before any arithmetic on it); an id seen in the last 10 minutes
//!   by any replica is refused too (409: it is remembered in the database,
//!   in the same transaction as the suppression).
//! * **Postmark** (`http.webhook_basic_auth`): HTTP basic auth, compared in
//!   constant time; Postmark's bounce body is read by its `Type`.
//!
//! Guarantees: the body is read only after the request named a way in,
//! within the listener's limits (`body`: 413 over 64 KiB, 408 past
//! `http.body_read_timeout`, 503 when half of `http.max_connections` are
//! reading bodies already; the connection is closed after each); no valid signature or credentials: 401; a body that cannot
//! be read: 400; the database away: 503 (the sender retries). Bad input never gets a 500. Neither secret,
//! nor the `Authorization` header, is ever logged or answered. Every
//! request is counted by outcome
//! (`invoice_reminder_webhook_requests_total`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::json;
use standardwebhooks::HEADER_WEBHOOK_SIGNATURE;
use subtle::ConstantTimeEq as _;

use super::AppState;
use super::body::{self, Unread};
use super::bounce::{self, Bounce};
use super::signature::{self, Refused};
use crate::config::HttpSettings;
use crate::db;
use crate::db::suppressions::{BounceRecorded, NewSuppression};

/// The route's path.
pub const PATH: &str = "/webhooks/bounces";

/// How the webhook checks who is calling, built once from the settings.
pub(super) struct WebhookAuth {
    /// The Standard Webhooks key; None: signed requests are refused.
    signer: Option<standardwebhooks::Webhook>,
    /// `user:password` for Postmark; None: basic auth is refused.
    basic: Option<SecretString>,
}

impl WebhookAuth {
    /// None when neither way in is configured (the route is off).
    pub(super) fn from_settings(http: &HttpSettings) -> Option<Arc<Self>> {
        if !http.webhook_enabled() {
            return None;
        }
        // Validated at start-up: a secret that does not decode never gets here.
        let signer = http
            .webhook_secret
            .as_ref()
            .and_then(|s| standardwebhooks::Webhook::new(s.expose_secret().trim()).ok());
        Some(Arc::new(Self {
            signer,
            basic: http.webhook_basic_auth.clone(),
        }))
    }

    /// Whether `Authorization: Basic ...` carries the configured
    /// `user:password` (compared in constant time).
    fn basic_matches(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.basic else {
            return false;
        };
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let Some((scheme, encoded)) = given.trim().split_once(' ') else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        decoded
            .as_slice()
            .ct_eq(expected.expose_secret().as_bytes())
            .into()
    }
}

/// How one request ended: its answer and its metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The address was added to (or updated on) the suppression list.
    Accepted,
    /// Read and authenticated, but nothing to suppress (a soft bounce).
    Ignored,
    /// No valid signature or credentials.
    Unauthorized,
    /// Signed, but its timestamp is more than 5 minutes off.
    Stale,
    /// Its `webhook-id` was seen in the last 10 minutes.
    Replayed,
    /// A body that cannot be read.
    BadRequest,
    /// A body over `body::MAX_BODY_BYTES`.
    TooLarge,
    /// A body that did not arrive within `http.body_read_timeout`.
    Timeout,
    /// Half of `http.max_connections` are reading webhook bodies already.
    Busy,
    /// The database did not take it; the sender should retry.
    Error,
}

impl Outcome {
    /// The `outcome` label of `invoice_reminder_webhook_requests_total`.
    fn label(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Ignored => "ignored",
            Self::Unauthorized => "unauthorized",
            Self::Stale => "stale",
            Self::Replayed => "replayed",
            Self::BadRequest => "bad_request",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::Busy => "busy",
            Self::Error => "error",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Self::Accepted | Self::Ignored => StatusCode::OK,
            Self::Unauthorized | Self::Stale => StatusCode::UNAUTHORIZED,
            Self::Replayed => StatusCode::CONFLICT,
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Timeout => StatusCode::REQUEST_TIMEOUT,
            Self::Error | Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// The way in a request took.
enum Caller {
    /// Standard Webhooks, with its message id.
    Signed {
        id: String,
    },
    Postmark,
}

pub(super) async fn bounces(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (outcome, reason) = match state.webhook.as_deref() {
        Some(auth) => handle(&state, auth, &headers, body).await,
        None => (Outcome::Unauthorized, "the webhook is off".to_owned()),
    };
    state.ctx.metrics.webhook_request(outcome.label());
    let status = outcome.status();
    let body = if status.is_success() {
        json!({"status": "ok", "outcome": outcome.label()})
    } else {
        json!({"status": "fail", "outcome": outcome.label(), "reason": reason})
    };
    if matches!(
        outcome,
        Outcome::Timeout | Outcome::TooLarge | Outcome::Busy
    ) {
        // The rest of the body is not waited for.
        return (status, [(header::CONNECTION, "close")], axum::Json(body)).into_response();
    }
    (status, axum::Json(body)).into_response()
}

async fn handle(
    state: &AppState,
    auth: &WebhookAuth,
    headers: &HeaderMap,
    body: Body,
) -> (Outcome, String) {
    let signed = headers.contains_key(HEADER_WEBHOOK_SIGNATURE);
    // Who is calling is settled as far as the headers allow before the
    // body is read.
    if signed && auth.signer.is_none() {
        return refuse(Outcome::Unauthorized, "signed requests are not configured");
    }
    if !signed && !auth.basic_matches(headers) {
        return refuse(
            Outcome::Unauthorized,
            "no valid webhook-signature or basic auth",
        );
    }
    let body = match body::read(state, body, body::MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(unread) => {
            let outcome = match unread {
                Unread::TooLarge(_) => Outcome::TooLarge,
                Unread::Timeout => Outcome::Timeout,
                Unread::Broken => Outcome::BadRequest,
                Unread::Busy => Outcome::Busy,
            };
            return refuse(outcome, &unread.reason());
        }
    };
    let caller = match &auth.signer {
        Some(signer) if signed => {
            match signature::check(
                signer,
                headers,
                &body,
                signature::now(),
                signature::TIMESTAMP_TOLERANCE_SECS,
            ) {
                Ok(id) => Caller::Signed { id },
                Err(refused) => {
                    let outcome = match refused {
                        Refused::Stale => Outcome::Stale,
                        Refused::Unauthorized(_) => Outcome::Unauthorized,
                        Refused::BadRequest(_) => Outcome::BadRequest,
                    };
                    let reason = match refused {
                        Refused::Stale => "webhook-timestamp is more than 5 minutes off",
                        other => other.reason(),
                    };
                    return refuse(outcome, reason);
                }
            }
        }
        _ => Caller::Postmark,
    };
    let bounce = match bounce::parse(&body) {
        Ok(bounce) => bounce,
        Err(e) => return refuse(Outcome::BadRequest, &e.to_string()),
    };
    let webhook_id = match &caller {
        Caller::Signed { id } => Some(id.as_str()),
        Caller::Postmark => None,
    };
    record(state, webhook_id, &bounce).await
}

/// Suppresses the bounce's address (or, for a soft bounce, only logs it
/// and remembers its message id).
async fn record(state: &AppState, webhook_id: Option<&str>, bounce: &Bounce) -> (Outcome, String) {
    let database = &state.ctx.db;
    let kind = bounce.kind;
    if !kind.suppresses() {
        tracing::info!(
            address = %bounce.address,
            kind = kind.label(),
            r#type = bounce.original_type.as_deref().unwrap_or(""),
            detail = bounce.detail.as_deref().unwrap_or(""),
            "transient bounce received; the address stays on (reminders are retried as usual)"
        );
        return match webhook_id {
            None => (Outcome::Ignored, String::new()),
            Some(id) => match db::suppressions::remember_webhook_id(database, id).await {
                Ok(true) => (Outcome::Ignored, String::new()),
                Ok(false) => refuse(Outcome::Replayed, "webhook-id was seen before"),
                Err(e) => unavailable(&e),
            },
        };
    }
    let entry = NewSuppression {
        address: &bounce.address,
        reason: kind.label(),
        source: bounce.format.source(),
        detail: bounce.detail.as_deref(),
    };
    match db::suppressions::record_bounce(database, webhook_id, entry).await {
        Ok(BounceRecorded::Recorded(added)) => {
            tracing::info!(
                address = %bounce.address,
                kind = kind.label(),
                source = bounce.format.source(),
                ?added,
                "address suppressed by the bounce webhook"
            );
            (Outcome::Accepted, String::new())
        }
        Ok(BounceRecorded::Replayed) => refuse(Outcome::Replayed, "webhook-id was seen before"),
        Err(e) => unavailable(&e),
    }
}

fn refuse(outcome: Outcome, reason: &str) -> (Outcome, String) {
    tracing::debug!(
        outcome = outcome.label(),
        reason,
        "bounce webhook request refused"
    );
    (outcome, reason.to_owned())
}

fn unavailable(e: &sqlx::Error) -> (Outcome, String) {
    tracing::warn!(error = %e, "the bounce webhook could not write to the database; the sender will retry");
    (
        Outcome::Error,
        "the database is not available; retry later".to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_matches_only_the_configured_pair() {
        let auth = WebhookAuth {
            signer: None,
            basic: Some(SecretString::from("postmark:s3cret")),
        };
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, value.parse().unwrap());
            auth.basic_matches(&h)
        };
        let good = base64::engine::general_purpose::STANDARD.encode("postmark:s3cret");
        let bad = base64::engine::general_purpose::STANDARD.encode("postmark:s3cres");
        assert!(with(&format!("Basic {good}")));
        assert!(with(&format!("basic {good}")));
        assert!(!with(&format!("Basic {bad}")));
        assert!(!with(&format!("Bearer {good}")));
        assert!(!with("Basic !!!"));
        assert!(!auth.basic_matches(&HeaderMap::new()));
    }

    #[test]
    fn outcomes_answer_the_documented_statuses() {
        assert_eq!(Outcome::Unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Outcome::BadRequest.status(), StatusCode::BAD_REQUEST);
        assert_eq!(Outcome::TooLarge.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(Outcome::Replayed.status(), StatusCode::CONFLICT);
        assert_eq!(Outcome::Accepted.status(), StatusCode::OK);
    }
}
