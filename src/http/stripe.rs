//! Stripe's signature: the `Stripe-Signature` header checked (its
//! timestamp within `payments.tolerance` first, then HMAC-SHA256 over
//! `timestamp.body` with each of `payments.stripe_secrets`, compared in
//! constant time with each `v1` signature). What a verified event says is
//! read in `stripe_events`.

use secrecy::{ExposeSecret as _, SecretString};
use subtle::ConstantTimeEq as _;

use super::signature::Refused;

/// The header Stripe signs with.
pub const HEADER: &str = "stripe-signature";

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
}
