//! A local server answering the two requests the worker makes of
//! Stripe's API as Stripe does (`GET /v1/invoice_payments` filtered by
//! PaymentIntent, `GET /v1/charges/<id>`), from what the test told it, and
//! misbehaving on demand as Stripe's API does: 429 with `Retry-After`,
//! 500, an answer held until the test lets it go, an empty list, 401.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

/// How the server answers a request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// As Stripe would, from what it was told.
    Normal,
    /// `429 Too Many Requests` with `Retry-After: <seconds>`.
    TooMany(u64),
    /// `500`.
    Broken,
    /// `401`, the key refused.
    Unauthorized,
    /// Held until [`StripeApi::release`].
    Held,
}

#[derive(Default)]
struct Inner {
    /// PaymentIntent -> its invoice (the expanded Invoice object).
    invoices: HashMap<String, Value>,
    /// Charge -> its PaymentIntent.
    charges: HashMap<String, String>,
    /// The answers to give, in order; then `Normal`.
    script: VecDeque<Answer>,
    /// Every request: its path and query, and whether it had a bearer key.
    requests: Vec<(String, bool)>,
    answered: usize,
}

/// The server. Cheap to clone.
#[derive(Clone)]
pub struct StripeApi {
    pub base: String,
    inner: Arc<Mutex<Inner>>,
    /// Set once held answers may go.
    released: Arc<tokio::sync::watch::Sender<bool>>,
}

impl StripeApi {
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let released = Arc::new(tokio::sync::watch::Sender::new(false));
        let api = Self {
            base: String::new(),
            inner,
            released,
        };
        let app = axum::Router::new()
            .route("/v1/invoice_payments", get(invoice_payments))
            .route("/v1/charges/{id}", get(charge))
            .with_state(api.clone());
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/", tcp.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(tcp, app).await });
        Self { base, ..api }
    }

    /// PaymentIntent `pi` pays Stripe invoice `invoice` (an Invoice object).
    pub fn pays(&self, pi: &str, invoice: Value) {
        self.lock().invoices.insert(pi.to_owned(), invoice);
    }

    /// Charge `charge` belongs to PaymentIntent `pi`.
    pub fn charge_of(&self, charge: &str, pi: &str) {
        self.lock().charges.insert(charge.to_owned(), pi.to_owned());
    }

    /// The next requests get `answers`, in order.
    pub fn script(&self, answers: &[Answer]) {
        self.lock().script.extend(answers.iter().cloned());
    }

    /// Lets every held answer go.
    pub fn release(&self) {
        self.released.send_replace(true);
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<(String, bool)> {
        self.lock().requests.clone()
    }

    /// Requests answered so far.
    pub fn answered(&self) -> usize {
        self.lock().answered
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the request and gives its scripted answer, None: normal.
    async fn misbehave(&self, what: String, headers: &HeaderMap) -> Option<Response> {
        let keyed = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Bearer rk_"));
        let answer = {
            let mut inner = self.lock();
            inner.requests.push((what, keyed));
            inner.script.pop_front().unwrap_or(Answer::Normal)
        };
        let response = match answer {
            Answer::Normal => None,
            Answer::Held => {
                let mut released = self.released.subscribe();
                let _ = released.wait_for(|go| *go).await;
                None
            }
            Answer::TooMany(seconds) => Some(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", seconds.to_string())],
                    axum::Json(error(
                        "rate_limit",
                        "Too many requests hit the API too quickly.",
                    )),
                )
                    .into_response(),
            ),
            Answer::Broken => Some(
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(error("api_error", "An unknown error occurred")),
                )
                    .into_response(),
            ),
            Answer::Unauthorized => Some(
                (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(error(
                        "invalid_request_error",
                        "Invalid API Key provided: rk_test_***",
                    )),
                )
                    .into_response(),
            ),
        };
        self.lock().answered += 1;
        response
    }
}

fn error(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "message": message}})
}

async fn invoice_payments(
    State(api): State<StripeApi>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let pi = query
        .get("payment[payment_intent]")
        .cloned()
        .unwrap_or_default();
    if let Some(refused) = api
        .misbehave(format!("invoice_payments {pi}"), &headers)
        .await
    {
        return refused;
    }
    let data: Vec<Value> = api
        .lock()
        .invoices
        .get(&pi)
        .map(|invoice| {
            let expanded = query.get("expand[]").is_some_and(|e| e == "data.invoice");
            let id = invoice["id"].clone();
            json!({"id": format!("inpay_{pi}"), "object": "invoice_payment",
                   "amount_paid": null, "amount_requested": invoice["amount_due"],
                   "currency": "eur", "invoice": if expanded { invoice.clone() } else { id },
                   "is_default": true, "livemode": false,
                   "payment": {"type": "payment_intent", "payment_intent": pi},
                   "status": "open",
                   "status_transitions": {"canceled_at": null, "paid_at": null}})
        })
        .into_iter()
        .collect();
    axum::Json(json!({"object": "list", "data": data, "has_more": false,
                      "url": "/v1/invoice_payments"}))
    .into_response()
}

async fn charge(
    State(api): State<StripeApi>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = api.misbehave(format!("charges {id}"), &headers).await {
        return refused;
    }
    let pi = api.lock().charges.get(&id).cloned();
    match pi {
        Some(pi) => axum::Json(json!({"id": id, "object": "charge", "payment_intent": pi,
                                      "status": "pending", "paid": false}))
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(error("invalid_request_error", "No such charge")),
        )
            .into_response(),
    }
}
