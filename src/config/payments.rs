//! `[payments]`: the payment signals that hold reminders before the books
//! catch up (docs/own-invoices.md, "Payment signals"). Stripe's events on
//! `POST /webhooks/stripe`, signed with one of `stripe_secrets`; anyone
//! else's `paid`, `pending`, `disputed` or `released` on
//! `POST /webhooks/payments`, signed by the Standard Webhooks scheme with
//! `secret`. Each route is off until its secret is set. Secrets are
//! checked for their form only, and never printed.

use std::time::Duration;

use secrecy::{ExposeSecret as _, SecretString};
use serde::{Deserialize, Deserializer};

use super::ConfigError;

/// The longest tolerated clock difference between a signer and us.
const MAX_TOLERANCE: Duration = Duration::from_secs(24 * 3600);
/// The longest a pending payment holds reminders.
const MAX_PENDING_HOLD: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentSettings {
    /// Stripe's endpoint signing secrets (`whsec_...`), several during a
    /// rotation; empty: `POST /webhooks/stripe` is off.
    #[serde(deserialize_with = "secrets")]
    pub stripe_secrets: Vec<SecretString>,
    /// The Standard Webhooks secret of the generic signal; None:
    /// `POST /webhooks/payments` is off.
    #[serde(deserialize_with = "super::types::optional_secret")]
    pub secret: Option<SecretString>,
    /// Where our invoice id is in a Stripe object: a dotted path such as
    /// `metadata.invoice_id`, or `number`.
    pub stripe_invoice_key: String,
    /// How long a pending payment holds reminders, from its event's time.
    #[serde(with = "humantime_serde")]
    pub pending_hold: Duration,
    /// How far a signature's timestamp may be from our clock.
    #[serde(with = "humantime_serde")]
    pub tolerance: Duration,
    /// A Stripe API key (`rk_...` restricted to reading invoices, or
    /// `sk_...`) for the lookups that link a PaymentIntent to its invoice
    /// when no event says it; None: no lookups.
    #[serde(deserialize_with = "super::types::optional_secret")]
    pub stripe_api_key: Option<SecretString>,
    /// Where Stripe's API is (tests point it at a local server).
    pub stripe_api_base: url::Url,
}

impl PaymentSettings {
    /// Whether either route is on.
    pub fn enabled(&self) -> bool {
        !self.stripe_secrets.is_empty() || self.secret.is_some()
    }

    /// The key path's segments (validated: none is empty).
    pub fn invoice_key_path(&self) -> impl Iterator<Item = &str> {
        self.stripe_invoice_key.split('.')
    }
}

fn secrets<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<SecretString>, D::Error> {
    let list = Vec::<String>::deserialize(de)?;
    Ok(list
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .map(SecretString::from)
        .collect())
}

/// The forms of the secrets, the key path and the two durations.
pub(super) fn check(p: &PaymentSettings) -> Result<(), ConfigError> {
    for secret in &p.stripe_secrets {
        let key = secret.expose_secret().strip_prefix("whsec_").unwrap_or("");
        if key.is_empty() {
            return Err(ConfigError::new(
                "payments.stripe_secrets",
                "each must be a Stripe endpoint signing secret: whsec_ followed by its key",
            ));
        }
    }
    if let Some(secret) = &p.secret {
        let secret = secret.expose_secret().trim();
        let form = secret
            .strip_prefix("whsec_")
            .is_some_and(|k| !k.is_empty() && standardwebhooks::Webhook::new(secret).is_ok());
        if !form {
            return Err(ConfigError::new(
                "payments.secret",
                "must be the Standard Webhooks form: whsec_ followed by the base64 key",
            ));
        }
    }
    if p.invoice_key_path()
        .any(|s| s.trim().is_empty() || s.trim() != s)
    {
        return Err(ConfigError::new(
            "payments.stripe_invoice_key",
            "must be a dotted path of names, such as \"metadata.invoice_id\" or \"number\"",
        ));
    }
    if p.pending_hold.is_zero() || p.pending_hold > MAX_PENDING_HOLD {
        return Err(ConfigError::new(
            "payments.pending_hold",
            "must be greater than zero and at most 365 days",
        ));
    }
    if let Some(key) = &p.stripe_api_key {
        let key = key.expose_secret();
        let form = ["sk_", "rk_"]
            .iter()
            .any(|prefix| key.strip_prefix(prefix).is_some_and(|k| !k.is_empty()))
            && !key.chars().any(char::is_whitespace);
        if !form {
            return Err(ConfigError::new(
                "payments.stripe_api_key",
                "must be a Stripe API key: rk_... (restricted, read access to invoices) or sk_...",
            ));
        }
    }
    if !matches!(p.stripe_api_base.scheme(), "http" | "https") || p.stripe_api_base.host().is_none()
    {
        return Err(ConfigError::new(
            "payments.stripe_api_base",
            "must be an http(s) URL such as https://api.stripe.com",
        ));
    }
    if p.tolerance.is_zero() || p.tolerance > MAX_TOLERANCE {
        return Err(ConfigError::new(
            "payments.tolerance",
            "must be greater than zero and at most 24 hours",
        ));
    }
    Ok(())
}
