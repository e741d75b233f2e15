//! Standard Webhooks signatures, checked without trusting the request:
//! `webhook-id`, `webhook-timestamp` and `webhook-signature` (HMAC-SHA256
//! over `id.timestamp.body`, signed by the `standardwebhooks` crate and
//! compared here in constant time with each `v1` signature the header
//! lists). A timestamp further from our clock than the tolerance (the
//! bounce webhook's [`TIMESTAMP_TOLERANCE_SECS`], `payments.tolerance`)
//! is refused before anything else, with no arithmetic that could
//! overflow. An id longer than [`MAX_ID_BYTES`] is refused too: it would
//! be stored.

use axum::http::HeaderMap;
use standardwebhooks::{
    HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP, WebhookError,
};
use subtle::ConstantTimeEq as _;

/// The longest `webhook-id` remembered.
pub const MAX_ID_BYTES: usize = 256;

/// How far `webhook-timestamp` may be from our clock, either way: the
/// Standard Webhooks tolerance (5 minutes).
pub const TIMESTAMP_TOLERANCE_SECS: u64 = 5 * 60;

/// Why a signed request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its timestamp is outside the window (401).
    Stale,
    /// No valid signature, or no id or timestamp to check it with (401).
    Unauthorized(&'static str),
    /// Signed, but its id or body cannot be used (400).
    BadRequest(&'static str),
}

impl Refused {
    /// What the answer says.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Self::Stale => "the timestamp is further from our clock than the tolerance",
            Self::Unauthorized(reason) | Self::BadRequest(reason) => reason,
        }
    }
}

/// Our clock, in unix seconds.
pub(super) fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Checks a signed request at unix time `now`, its timestamp within
/// `tolerance` seconds of it: its `webhook-id`, or why it is refused.
pub(super) fn check(
    signer: &standardwebhooks::Webhook,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance: u64,
) -> Result<String, Refused> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(timestamp) = text(HEADER_WEBHOOK_TIMESTAMP).and_then(|t| t.parse::<i64>().ok()) else {
        return Err(Refused::Unauthorized(
            "webhook-timestamp is missing or not a number",
        ));
    };
    if now.abs_diff(timestamp) > tolerance {
        return Err(Refused::Stale);
    }
    let Some(id) = text(HEADER_WEBHOOK_ID).filter(|id| !id.is_empty()) else {
        return Err(Refused::Unauthorized("webhook-id is missing"));
    };
    if id.len() > MAX_ID_BYTES {
        return Err(Refused::BadRequest("webhook-id is longer than 256 bytes"));
    }
    let Some(given) = text(HEADER_WEBHOOK_SIGNATURE) else {
        return Err(Refused::Unauthorized("no valid webhook-signature"));
    };
    let expected = match signer.sign(id, timestamp, body) {
        Ok(signed) => signed,
        Err(WebhookError::InvalidPayload) => {
            return Err(Refused::BadRequest("the body is not UTF-8"));
        }
        Err(_) => return Err(Refused::Unauthorized("no valid webhook-signature")),
    };
    let expected = expected.split_once(',').map_or("", |(_, sig)| sig);
    let matches = given
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .any(|(_, sig)| bool::from(sig.as_bytes().ct_eq(expected.as_bytes())));
    if matches && !expected.is_empty() {
        Ok(id.to_owned())
    } else {
        Err(Refused::Unauthorized("no valid webhook-signature"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            if let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(name.as_bytes()),
                axum::http::HeaderValue::from_bytes(value.as_bytes()),
            ) {
                h.append(name, value);
            }
        }
        h
    }

    fn signed_at(timestamp: i64, id: &str, body: &[u8]) -> HeaderMap {
        let signer = standardwebhooks::Webhook::new(SECRET).unwrap();
        let signature = signer.sign(id, timestamp, body).unwrap();
        headers(&[
            ("webhook-id", id),
            ("webhook-timestamp", &timestamp.to_string()),
            ("webhook-signature", &signature),
        ])
    }

    #[test]
    fn a_correctly_signed_request_with_the_extreme_timestamps_is_stale_not_a_wrap() {
        let signer = standardwebhooks::Webhook::new(SECRET).unwrap();
        let body = br#"{"address":"a@b.c","kind":"hard_bounce"}"#;
        for timestamp in [i64::MIN, i64::MAX, i64::MIN + 1, 0] {
            let checked = check(
                &signer,
                &signed_at(timestamp, "msg_1", body),
                body,
                now(),
                TIMESTAMP_TOLERANCE_SECS,
            );
            assert_eq!(checked, Err(Refused::Stale), "{timestamp}");
        }
        let fresh = check(
            &signer,
            &signed_at(now(), "msg_1", body),
            body,
            now(),
            TIMESTAMP_TOLERANCE_SECS,
        );
        assert_eq!(fresh, Ok("msg_1".to_owned()));
    }

    /// How many cases each property runs.
    const CASES: u32 = 20_000;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(CASES))]

        /// Any headers, body and signature: an answer, never a panic, and
        /// accepted only when signed by the key, within the window, with
        /// an id of at most 256 bytes.
        #[test]
        fn the_verifier_accepts_only_what_the_key_signed_within_the_window(
            offset in proptest::prop_oneof![
                proptest::prelude::Just(i64::MIN),
                proptest::prelude::Just(i64::MAX),
                -400i64..400,
                proptest::prelude::any::<i64>(),
            ],
            id in proptest::prop_oneof![
                proptest::collection::vec(0x21u8..0x7f, 0..300),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            ],
            body in proptest::prop_oneof![
                proptest::collection::vec(0x20u8..0x7f, 0..200),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            ],
            tamper in 0u8..6,
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        ) {
            let signer = standardwebhooks::Webhook::new(SECRET).unwrap();
            let now = now();
            let timestamp = now.saturating_add(offset);
            let id = String::from_utf8_lossy(&id).into_owned();
            let junk = String::from_utf8_lossy(&junk).into_owned();
            let signature = signer.sign(&id, timestamp, &body).unwrap_or_else(|_| "v1,".into());
            let stamp = timestamp.to_string();
            let (signature, stamp, sent_body) = match tamper {
                0 => (signature, stamp, body.clone()),
                1 => (format!("v1,{junk}"), stamp, body.clone()),
                2 => (signature, junk.clone(), body.clone()),
                3 => (signature, stamp, [body.as_slice(), b"x"].concat()),
                4 => (format!("{junk} {signature}"), stamp, body.clone()),
                _ => (junk.clone(), junk.clone(), body.clone()),
            };
            let h = headers(&[
                ("webhook-id", &id),
                ("webhook-timestamp", &stamp),
                ("webhook-signature", &signature),
            ]);
            let checked = check(&signer, &h, &sent_body, now, TIMESTAMP_TOLERANCE_SECS);
            let header_ok = |name: &str, value: &str| {
                h.get(name).and_then(|v| v.to_str().ok()) == Some(value)
            };
            let genuine = matches!(tamper, 0 | 4)
                && std::str::from_utf8(&body).is_ok()
                && header_ok("webhook-id", &id)
                && header_ok("webhook-signature", &signature)
                && !id.is_empty()
                && id.len() <= MAX_ID_BYTES
                && offset.unsigned_abs() <= TIMESTAMP_TOLERANCE_SECS;
            proptest::prop_assert_eq!(checked.is_ok(), genuine, "{:?}", checked);
            if offset.unsigned_abs() > TIMESTAMP_TOLERANCE_SECS && tamper != 2 && tamper != 5 {
                proptest::prop_assert_eq!(checked, Err(Refused::Stale));
            }
        }
    }
}
