//! Stripe's events: the `Stripe-Signature` header checked (its timestamp
//! within `payments.tolerance` first, then HMAC-SHA256 over
//! `timestamp.body` with each of `payments.stripe_secrets`, compared in
//! constant time with each `v1` signature), and the event read into the
//! signal it carries, if any:
//!
//! | event | signal |
//! |---|---|
//! | `invoice.paid`, `payment_intent.succeeded` | paid |
//! | `payment_intent.processing` | pending |
//! | `payment_intent.payment_failed` | failed (ends a paid or pending hold) |
//! | `charge.dispute.created` | disputed |
//! | `charge.dispute.closed`, `status` `won` | released (ends any hold) |
//!
//! Our invoice id is read from the event's object at
//! `payments.stripe_invoice_key`; an object without it (a dispute) names
//! its payment intent, whose earlier event named the invoice.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::Value;
use subtle::ConstantTimeEq as _;

use super::signature::Refused;
use crate::domain::{InvoiceId, PaymentSignal, Signal};

/// The header Stripe signs with.
pub const HEADER: &str = "stripe-signature";

/// The longest id kept (an event's, an object's, an invoice's).
const MAX_ID_BYTES: usize = 256;

/// Checks `header` (the `Stripe-Signature` value) over `body` at unix time
/// `now`, the timestamp within `tolerance` seconds.
pub(super) fn verify(
    secrets: &[SecretString],
    header: &str,
    body: &[u8],
    now: i64,
    tolerance: u64,
) -> Result<(), Refused> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) if timestamp.is_none() => timestamp = Some(t),
            Some(("v1", sig)) => signatures.push(sig),
            _ => {}
        }
    }
    let Some((stamp, at)) = timestamp.and_then(|t| Some((t, t.parse::<i64>().ok()?))) else {
        return Err(Refused::Unauthorized(
            "Stripe-Signature has no timestamp (t=...)",
        ));
    };
    if now.abs_diff(at) > tolerance {
        return Err(Refused::Stale);
    }
    let mut signed = Vec::with_capacity(stamp.len().saturating_add(body.len()).saturating_add(1));
    signed.extend_from_slice(stamp.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    let valid = secrets.iter().any(|secret| {
        let mac = hmac_sha256::HMAC::mac(&signed, secret.expose_secret().as_bytes());
        let expected = hex(&mac);
        signatures
            .iter()
            .any(|sig| bool::from(sig.as_bytes().ct_eq(expected.as_bytes())))
    });
    if valid {
        Ok(())
    } else {
        Err(Refused::Unauthorized(
            "no valid v1 signature in Stripe-Signature",
        ))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a verified event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    /// A signal to store.
    Signal(PaymentSignal),
    /// An event it does not act on: answered 2xx and counted.
    Ignored(String),
}

/// Reads a verified event; Err: the body is not a Stripe event (400).
pub(super) fn read(body: &[u8], invoice_key: &[&str]) -> Result<Event, String> {
    let event: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let id = text(&event, "id").ok_or("the event has no \"id\"")?;
    let kind = text(&event, "type").ok_or("the event has no \"type\"")?;
    let created = event
        .get("created")
        .and_then(Value::as_i64)
        .ok_or("the event has no \"created\" time")?;
    let at: DateTime<Utc> =
        DateTime::from_timestamp(created, 0).ok_or("the event's \"created\" is out of range")?;
    let object = event
        .get("data")
        .and_then(|d| d.get("object"))
        .filter(|o| o.is_object())
        .ok_or("the event has no \"data.object\"")?;
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err("the event's \"id\" is empty or longer than 256 bytes".to_owned());
    }
    let signal = match kind.as_str() {
        "invoice.paid" | "payment_intent.succeeded" => Signal::Paid,
        "payment_intent.processing" => Signal::Pending,
        "payment_intent.payment_failed" => Signal::Failed,
        "charge.dispute.created" => Signal::Disputed,
        "charge.dispute.closed" => match text(object, "status").as_deref() {
            Some("won") => Signal::Released,
            status => {
                return Ok(Event::Ignored(format!(
                    "a dispute closed as {}: its hold stays until an operator lifts it",
                    status.unwrap_or("unknown")
                )));
            }
        },
        other => return Ok(Event::Ignored(format!("{other} is not acted on"))),
    };
    let short = |s: Option<String>| s.filter(|s| !s.is_empty() && s.len() <= MAX_ID_BYTES);
    Ok(Event::Signal(PaymentSignal {
        provider: "stripe",
        event_id: id,
        signal,
        invoice_id: short(lookup(object, invoice_key)).map(|s| InvoiceId::from(s.as_str())),
        object_id: short(text(object, "id")),
        linked: short(text(object, "payment_intent")),
        at,
    }))
}

/// The value at `path` in `object`, as text (a string, or a number).
fn lookup(object: &Value, path: &[&str]) -> Option<String> {
    let value = path.iter().try_fold(object, |v, key| v.get(*key))?;
    match value {
        Value::String(s) => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret";

    fn signed(body: &[u8], t: i64) -> String {
        let mut msg = t.to_string().into_bytes();
        msg.push(b'.');
        msg.extend_from_slice(body);
        format!(
            "t={t},v1={}",
            hex(&hmac_sha256::HMAC::mac(&msg, SECRET.as_bytes()))
        )
    }

    #[test]
    fn a_signature_by_any_configured_secret_within_the_tolerance_is_accepted() {
        let secrets = [SecretString::from("whsec_old"), SecretString::from(SECRET)];
        let body = br#"{"id":"evt_1"}"#;
        assert_eq!(
            verify(&secrets, &signed(body, 1000), body, 1000, 300),
            Ok(())
        );
        assert_eq!(
            verify(&secrets, &signed(body, 1000), body, 1301, 300),
            Err(Refused::Stale)
        );
        assert!(verify(&secrets, &signed(body, 1000), b"{}", 1000, 300).is_err());
        assert!(verify(&secrets[..1], &signed(body, 1000), body, 1000, 300).is_err());
        assert!(verify(&secrets, "v1=00", body, 1000, 300).is_err());
        assert!(verify(&secrets, &format!("t={},v1=x", i64::MIN), body, 1000, 300).is_err());
    }

    #[test]
    fn an_event_maps_to_its_signal_and_names_the_invoice_at_the_configured_key() {
        let body = br#"{"id":"evt_1","type":"payment_intent.processing","created":1700000000,
            "data":{"object":{"id":"pi_1","metadata":{"invoice_id":"42"}}}}"#;
        let Ok(Event::Signal(s)) = read(body, &["metadata", "invoice_id"]) else {
            panic!("a signal");
        };
        assert_eq!(
            (s.signal, s.invoice_id),
            (Signal::Pending, Some(InvoiceId::from("42")))
        );
        assert_eq!(s.object_id.as_deref(), Some("pi_1"));
        let other = br#"{"id":"evt_2","type":"customer.created","created":1,"data":{"object":{}}}"#;
        assert!(matches!(read(other, &["number"]), Ok(Event::Ignored(_))));
        assert!(read(b"{", &["number"]).is_err());
        assert!(read(br#"{"id":"evt_3","type":"invoice.paid"}"#, &["number"]).is_err());
    }
}
