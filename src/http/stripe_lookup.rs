//! Asking Stripe what its webhooks no longer say. From 2025-03-31.basil a
//! PaymentIntent that Stripe Billing started names no invoice, and a
//! dispute names only its PaymentIntent and Charge; when such an event
//! finds no invoice and `payments.stripe_api_key` is set, the worker asks
//! `GET /v1/invoice_payments?payment[type]=payment_intent&payment[payment_intent]=<id>`
//! (a dispute without a PaymentIntent reads its Charge first) and learns
//! the link from the answer, which applies the signals waiting for it
//! (`db::payments::learn`).
//!
//! Guarantees: the webhook answers once its event is stored, never after
//! a lookup: lookups queue ([`QUEUED`] at most; more are dropped and
//! counted) for one task beside the route. Each request has a timeout
//! ([`TIMEOUT`]) and is tried at most [`ATTEMPTS`] times, a 429 after its
//! `Retry-After`, a 5xx or a timeout after a growing wait; after
//! [`BREAKER_AFTER`] lookups in a row that failed so, none is tried for
//! [`BREAKER_OPEN`]. A 401 or 403 is logged once, at error, naming
//! `payments.stripe_api_key`. The key is never logged. Every lookup is
//! counted (`invoice_reminder_stripe_lookups_total`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use secrecy::{ExposeSecret as _, SecretString};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::stripe_events::{Ask, id_of, lookup};
use crate::config::PaymentSettings;
use crate::db::{self, Db};
use crate::domain::{InvoiceId, LinkTo, PaymentLink};
use crate::metrics::Metrics;

/// How long one request may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Tries per lookup.
pub const ATTEMPTS: u32 = 4;
/// The first wait after a 5xx or a timeout; it doubles.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait, `Retry-After` included.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Failed lookups in a row that open the breaker.
pub const BREAKER_AFTER: u32 = 3;
/// How long the open breaker lets no lookup through.
pub const BREAKER_OPEN: Duration = Duration::from_secs(60);
/// Lookups waiting at most.
pub const QUEUED: usize = 1_000;
/// The API version the lookups ask in (InvoicePayment exists from it on).
const VERSION: &str = "2025-03-31.basil";

/// The queue of lookups, and its task. Cheap to clone.
#[derive(Clone)]
pub struct Lookups {
    queue: mpsc::Sender<Ask>,
    metrics: Metrics,
}

impl Lookups {
    /// Starts the task when a key is set; it ends when `stop` is cancelled.
    pub fn start(
        settings: &PaymentSettings,
        db: Db,
        metrics: Metrics,
        stop: CancellationToken,
    ) -> Option<Self> {
        let key = settings.stripe_api_key.clone()?;
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| tracing::error!(error = %e, "no HTTP client for Stripe lookups"))
            .ok()?;
        let (queue, asked) = mpsc::channel(QUEUED);
        let worker = Worker {
            client,
            key,
            base: settings.stripe_api_base.clone(),
            invoice_key: settings.invoice_key_path().map(str::to_owned).collect(),
            pending_hold: settings.pending_hold,
            db,
            metrics: metrics.clone(),
            refused: Arc::default(),
        };
        tokio::spawn(worker.run(asked, stop));
        Some(Self { queue, metrics })
    }

    /// Queues `ask`; never waits.
    pub fn ask(&self, ask: Ask) {
        if self.queue.try_send(ask).is_err() {
            tracing::warn!(
                "the Stripe lookup queue is full; the signal stays unlinked until an event links it"
            );
            self.metrics.stripe_lookup("dropped");
        }
    }
}

/// How one lookup ended.
enum Failure {
    /// 401 or 403: the key.
    Unauthorized(u16),
    /// Another 4xx: nothing to find.
    NotFound,
    /// 5xx, 429 or no answer after every try.
    Unavailable(String),
}

struct Worker {
    client: reqwest::Client,
    key: SecretString,
    base: url::Url,
    invoice_key: Vec<String>,
    pending_hold: Duration,
    db: Db,
    metrics: Metrics,
    /// A 401 or 403 was logged.
    refused: Arc<AtomicBool>,
}

impl Worker {
    async fn run(self, mut asked: mpsc::Receiver<Ask>, stop: CancellationToken) {
        let mut failed_in_a_row = 0u32;
        let mut recent: HashSet<Ask> = HashSet::new();
        loop {
            let ask = tokio::select! {
                () = stop.cancelled() => return,
                ask = asked.recv() => match ask {
                    Some(ask) => ask,
                    None => return,
                },
            };
            // The same object asked again while its answer is known.
            if !recent.insert(ask.clone()) {
                continue;
            }
            if recent.len() > QUEUED {
                recent.clear();
            }
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.look_up(&ask) => outcome,
            };
            let label = match outcome {
                Ok(true) => "linked",
                Ok(false) => "not_found",
                Err(Failure::NotFound) => "not_found",
                Err(Failure::Unauthorized(status)) => {
                    if !self.refused.swap(true, Ordering::SeqCst) {
                        tracing::error!(
                            status,
                            "Stripe refused payments.stripe_api_key ({status}): no lookups link payments to invoices until it is fixed; the webhook routes keep working"
                        );
                    }
                    "unauthorized"
                }
                Err(Failure::Unavailable(why)) => {
                    tracing::warn!(reason = %why, "a Stripe lookup failed after its retries; the signal stays unlinked until an event links it");
                    "failed"
                }
            };
            self.metrics.stripe_lookup(label);
            recent.remove(&ask);
            failed_in_a_row = if label == "failed" {
                failed_in_a_row.saturating_add(1)
            } else {
                0
            };
            if failed_in_a_row >= BREAKER_AFTER {
                tracing::warn!(
                    seconds = BREAKER_OPEN.as_secs(),
                    "Stripe's API keeps failing; no lookup is tried for a while"
                );
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(BREAKER_OPEN) => {}
                }
                failed_in_a_row = 0;
            }
        }
    }

    /// Looks `ask` up and learns what it finds: whether a link was found.
    async fn look_up(&self, ask: &Ask) -> Result<bool, Failure> {
        let mut links = Vec::new();
        let pi = match ask {
            Ask::PaymentIntent(pi) => pi.clone(),
            Ask::Charge(charge) => {
                let found = self.get(&format!("v1/charges/{charge}"), &[]).await?;
                let Some(pi) = found.get("payment_intent").and_then(id_of) else {
                    return Ok(false);
                };
                links.push(link(charge, LinkTo::Object(pi.clone())));
                pi
            }
        };
        let query = [
            ("payment[type]", "payment_intent"),
            ("payment[payment_intent]", pi.as_str()),
            ("limit", "1"),
            ("expand[]", "data.invoice"),
        ];
        let list = self.get("v1/invoice_payments", &query).await?;
        let Some(first) = list
            .get("data")
            .and_then(Value::as_array)
            .and_then(|d| d.first())
        else {
            return Ok(false);
        };
        let Some(invoice) = first.get("invoice") else {
            return Ok(false);
        };
        let Some(invoice_id) = id_of(invoice) else {
            return Ok(false);
        };
        links.push(link(&pi, LinkTo::Object(invoice_id.clone())));
        // Expanded, the Stripe invoice may name ours itself.
        let path: Vec<&str> = self.invoice_key.iter().map(String::as_str).collect();
        if let Some(ours) = lookup(invoice, &path) {
            links.push(link(
                &invoice_id,
                LinkTo::Invoice(InvoiceId::from(ours.as_str())),
            ));
        }
        db::payments::learn(&self.db, "stripe", &links, self.pending_hold)
            .await
            .map_err(|e| {
                Failure::Unavailable(format!("the database did not take the link: {e}"))
            })?;
        Ok(true)
    }

    /// `GET path?query`, tried as the module doc says.
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, Failure> {
        let url = self
            .base
            .join(path)
            .map_err(|e| Failure::Unavailable(format!("bad URL: {e}")))?;
        let mut wait = FIRST_WAIT;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            let sent = self
                .client
                .get(url.clone())
                .query(query)
                .bearer_auth(self.key.expose_secret())
                .header("Stripe-Version", VERSION)
                .send()
                .await;
            let pause = match sent {
                Ok(answer) => {
                    let status = answer.status().as_u16();
                    match status {
                        200..=299 => {
                            return answer.json::<Value>().await.map_err(|e| {
                                Failure::Unavailable(format!("the answer is not JSON: {e}"))
                            });
                        }
                        401 | 403 => return Err(Failure::Unauthorized(status)),
                        429 => {
                            last = "429 Too Many Requests".to_owned();
                            retry_after(&answer).unwrap_or(wait)
                        }
                        500..=599 => {
                            last = format!("{status} from Stripe");
                            wait
                        }
                        _ => return Err(Failure::NotFound),
                    }
                }
                Err(e) => {
                    last = if e.is_timeout() {
                        format!("no answer within {}s", TIMEOUT.as_secs())
                    } else {
                        "no connection to Stripe's API".to_owned()
                    };
                    wait
                }
            };
            if attempt < ATTEMPTS {
                tokio::time::sleep(pause.min(MAX_WAIT)).await;
                wait = wait.saturating_mul(2).min(MAX_WAIT);
            }
        }
        Err(Failure::Unavailable(last))
    }
}

/// A 429's `Retry-After`, in seconds.
fn retry_after(answer: &reqwest::Response) -> Option<Duration> {
    let seconds = answer
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

fn link(object: &str, to: LinkTo) -> PaymentLink {
    PaymentLink {
        object: object.to_owned(),
        to,
    }
}
