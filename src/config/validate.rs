//! Rules a single value's type cannot express: ranges, positive durations,
//! and the rules across keys (`lock.renew_every < lock.ttl`,
//! `redis.timeout < lock.ttl`, SMTP credentials set together, a CA file
//! only with TLS, the webhook's keys only with its secret and a listener).
//! A key that would be silently ignored because another is missing is an
//! error, never a no-op. Checked once, after deserializing; the first
//! broken rule is reported, naming its key.

use std::time::Duration;

use super::{ConfigError, MAX_BATCH_SIZE, Settings};

/// `http.max_connections` at most (per listener).
const MAX_HTTP_CONNECTIONS: u32 = 65_536;
/// `http.max_header_bytes`: room for a request line and the webhook's
/// headers, and at most 1 MiB.
const MIN_HEADER_BYTES: u32 = 1024;
const MAX_HEADER_BYTES: u32 = 1 << 20;
/// `reminders.retry_backoff_max` at most (3650 days): a retry time stays
/// far inside the range of PostgreSQL's `timestamptz`.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(3650 * 24 * 3600);

pub(super) fn check(s: &Settings) -> Result<(), ConfigError> {
    super::late_payment::check(&s.late_payment)?;
    if s.replica_id.chars().any(char::is_control) || s.replica_id.len() > 200 {
        return Err(ConfigError::new(
            "replica_id",
            "must be at most 200 characters without control characters",
        ));
    }
    at_least_one("database.max_connections", s.database.max_connections)?;
    positive("database.connect_timeout", s.database.connect_timeout)?;
    positive("database.statement_timeout", s.database.statement_timeout)?;
    positive("database.command_timeout", s.database.command_timeout)?;
    if s.database.pooler == super::Pooler::Transaction
        && s.lock.backend == super::LockBackendKind::Postgres
    {
        return Err(ConfigError::new(
            "database.pooler",
            "\"transaction\" cannot be used with lock.backend = \"postgres\": a session advisory lock cannot live behind a transaction pooler (use lock.backend = \"redis\", or a direct or session-pooled database.url)",
        ));
    }
    positive("redis.timeout", s.redis.timeout)?;
    lock(s)?;
    reminders(s)?;
    templates(s)?;
    http(s)?;
    super::payments::check(&s.payments)?;
    if s.payments.enabled() && s.http.webhook_addr().is_none() {
        let key = if s.payments.secret.is_some() {
            "payments.secret"
        } else {
            "payments.stripe_secrets"
        };
        return Err(ConfigError::new(
            key,
            "needs http.listen or http.webhook_listen: there is no listener to serve the payment signals on",
        ));
    }
    smtp(s)?;
    if s.archive.keep_days == 0 {
        return Err(ConfigError::new("archive.keep_days", "must be at least 1"));
    }
    tracing_subscriber::EnvFilter::try_new(&s.log.level).map_err(|e| {
        ConfigError::new(
            "log.level",
            format!("not a valid level or filter {:?}: {e}", s.log.level),
        )
    })?;
    positive("shutdown.timeout", s.shutdown.timeout)
}

fn lock(s: &Settings) -> Result<(), ConfigError> {
    let lock = &s.lock;
    if lock.key.trim().is_empty() {
        return Err(ConfigError::new("lock.key", "must not be empty"));
    }
    positive("lock.ttl", lock.ttl)?;
    positive("lock.renew_every", lock.renew_every)?;
    if lock.renew_every >= lock.ttl {
        return Err(ConfigError::new(
            "lock.renew_every",
            format!(
                "must be shorter than lock.ttl ({} >= {}), or the lock expires between renewals",
                humantime::format_duration(lock.renew_every),
                humantime::format_duration(lock.ttl)
            ),
        ));
    }
    if lock.ttl.as_millis() < 10 {
        return Err(ConfigError::new("lock.ttl", "must be at least 10ms"));
    }
    if s.redis.timeout >= lock.ttl {
        return Err(ConfigError::new(
            "redis.timeout",
            format!(
                "must be shorter than lock.ttl ({} >= {}), or a renewal cannot finish before the lease lapses",
                humantime::format_duration(s.redis.timeout),
                humantime::format_duration(lock.ttl)
            ),
        ));
    }
    Ok(())
}

fn reminders(s: &Settings) -> Result<(), ConfigError> {
    let r = &s.reminders;
    if r.batch_size == 0 || r.batch_size > MAX_BATCH_SIZE {
        return Err(ConfigError::new(
            "reminders.batch_size",
            format!("must be between 1 and {MAX_BATCH_SIZE}"),
        ));
    }
    at_least_one("reminders.max_attempts", r.max_attempts)?;
    let by_customer = r.group_by == super::GroupBy::Customer;
    let batch = usize::try_from(r.batch_size).unwrap_or(usize::MAX);
    if by_customer && r.max_invoices_per_mail.get() > batch {
        return Err(ConfigError::new(
            "reminders.max_invoices_per_mail",
            format!(
                "must be between 1 and reminders.batch_size ({}) with reminders.group_by = \"customer\"",
                r.batch_size
            ),
        ));
    }
    if r.retry_backoff > r.retry_backoff_max {
        return Err(ConfigError::new(
            "reminders.retry_backoff",
            format!(
                "must not be longer than reminders.retry_backoff_max ({} > {})",
                humantime::format_duration(r.retry_backoff),
                humantime::format_duration(r.retry_backoff_max)
            ),
        ));
    }
    if r.retry_backoff_max > MAX_RETRY_BACKOFF {
        return Err(ConfigError::new(
            "reminders.retry_backoff_max",
            "must be at most 3650 days",
        ));
    }
    if r.min_days_between > 3650 {
        return Err(ConfigError::new(
            "reminders.min_days_between",
            "must be at most 3650",
        ));
    }
    crate::stages::check(r.stages.stages()).map_err(|(index, field, reason)| {
        let key = match index {
            None => "reminders.stages".to_owned(),
            Some(i) => format!("reminders.stages[{i}].{field}"),
        };
        ConfigError::new(key, reason)
    })
}

fn templates(s: &Settings) -> Result<(), ConfigError> {
    let locale = &s.templates.default_locale;
    if crate::locale::parse_locale(locale).is_none() || locale.contains(['/', '\\']) {
        return Err(ConfigError::new(
            "templates.default_locale",
            format!("{locale:?} is not a language tag such as \"en\" or \"de-CH\""),
        ));
    }
    if let Some(dir) = &s.templates.dir
        && !dir.is_dir()
    {
        return Err(ConfigError::new(
            "templates.dir",
            format!("{} is not a directory", dir.display()),
        ));
    }
    if let Some(email) = &s.company.support_email
        && email.parse::<lettre::Address>().is_err()
    {
        return Err(ConfigError::new(
            "company.support_email",
            format!("not a valid address {email:?}"),
        ));
    }
    Ok(())
}

/// The listener's limits, and the webhook's keys that only work together:
/// basic auth and `webhook_listen` need the secret (the switch), and the
/// secret needs an address to be served on. The secrets are checked for
/// their form only; neither value is ever part of an error.
fn http(s: &Settings) -> Result<(), ConfigError> {
    use secrecy::ExposeSecret as _;
    let http = &s.http;
    if http.max_connections == 0 || http.max_connections > MAX_HTTP_CONNECTIONS {
        return Err(ConfigError::new(
            "http.max_connections",
            format!("must be between 1 and {MAX_HTTP_CONNECTIONS}"),
        ));
    }
    positive("http.header_read_timeout", http.header_read_timeout)?;
    positive("http.body_read_timeout", http.body_read_timeout)?;
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&http.max_header_bytes) {
        return Err(ConfigError::new(
            "http.max_header_bytes",
            format!("must be between {MIN_HEADER_BYTES} and {MAX_HEADER_BYTES}"),
        ));
    }
    if http.webhook_basic_auth.is_some() && http.webhook_secret.is_none() {
        return Err(ConfigError::new(
            "http.webhook_basic_auth",
            "needs http.webhook_secret: the bounce webhook is off without it, so Postmark's requests would get 404",
        ));
    }
    if http.webhook_listen.is_some() && http.webhook_secret.is_none() && !s.payments.enabled() {
        return Err(ConfigError::new(
            "http.webhook_listen",
            "needs http.webhook_secret or a payments secret: nothing is served on it without one",
        ));
    }
    if http.webhook_listen.is_some() && http.webhook_listen == http.listen {
        return Err(ConfigError::new(
            "http.webhook_listen",
            "must differ from http.listen (leave it empty to serve the webhook on http.listen)",
        ));
    }
    if http.webhook_secret.is_some() && http.webhook_addr().is_none() {
        return Err(ConfigError::new(
            "http.webhook_secret",
            "needs http.listen or http.webhook_listen: there is no listener to serve the webhook on",
        ));
    }
    if let Some(secret) = &http.webhook_secret {
        let secret = secret.expose_secret().trim();
        let key = secret.strip_prefix("whsec_").ok_or_else(|| {
            ConfigError::new(
                "http.webhook_secret",
                "must be the Standard Webhooks form: whsec_ followed by the base64 key",
            )
        })?;
        if key.is_empty() || standardwebhooks::Webhook::new(secret).is_err() {
            return Err(ConfigError::new(
                "http.webhook_secret",
                "the part after whsec_ is not base64 (standard alphabet, with padding)",
            ));
        }
    }
    if let Some(auth) = &http.webhook_basic_auth {
        let auth = auth.expose_secret();
        if auth.split_once(':').is_none_or(|(user, _)| user.is_empty()) {
            return Err(ConfigError::new(
                "http.webhook_basic_auth",
                "must be user:password",
            ));
        }
    }
    Ok(())
}

fn smtp(s: &Settings) -> Result<(), ConfigError> {
    let smtp = &s.smtp;
    if smtp.host.trim().is_empty() {
        return Err(ConfigError::new("smtp.host", "must not be empty"));
    }
    if smtp.port == 0 {
        return Err(ConfigError::new("smtp.port", "must be between 1 and 65535"));
    }
    positive("smtp.timeout", smtp.timeout)?;
    at_least_one("smtp.pool_size", smtp.pool_size)?;
    if let Some(file) = &smtp.ca_file {
        if smtp.tls == super::SmtpTls::None {
            return Err(ConfigError::new(
                "smtp.ca_file",
                "is only used with smtp.tls = \"starttls\" or \"tls\" (smtp.tls is \"none\")",
            ));
        }
        let pem = std::fs::read(file).map_err(|e| {
            ConfigError::new(
                "smtp.ca_file",
                format!("cannot read {}: {e}", file.display()),
            )
        })?;
        if lettre::transport::smtp::client::Certificate::from_pem(&pem).is_err() {
            return Err(ConfigError::new(
                "smtp.ca_file",
                format!("{} holds no PEM certificate", file.display()),
            ));
        }
    }
    if smtp.password.is_some() != smtp.username.is_some() {
        return Err(ConfigError::new(
            "smtp.username",
            "smtp.username and smtp.password must be set together",
        ));
    }
    dkim(&smtp.dkim)
}

/// `[smtp.dkim]`: all three keys or none; the key file is read and checked
/// here, once, and the signer kept.
fn dkim(d: &super::DkimSettings) -> Result<(), ConfigError> {
    let (domain, selector, file) = match (&d.domain, &d.selector, &d.private_key_file) {
        (None, None, None) => return Ok(()),
        (Some(domain), Some(selector), Some(file)) => (domain, selector, file),
        (_, _, None) => {
            return Err(ConfigError::new(
                "smtp.dkim.private_key_file",
                "missing: smtp.dkim.domain, smtp.dkim.selector and smtp.dkim.private_key_file are set together",
            ));
        }
        (None, _, _) => {
            return Err(ConfigError::new(
                "smtp.dkim.domain",
                "missing: smtp.dkim.domain, smtp.dkim.selector and smtp.dkim.private_key_file are set together",
            ));
        }
        (_, None, _) => {
            return Err(ConfigError::new(
                "smtp.dkim.selector",
                "missing: smtp.dkim.domain, smtp.dkim.selector and smtp.dkim.private_key_file are set together",
            ));
        }
    };
    let plausible = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            })
    };
    if !plausible(domain) {
        return Err(ConfigError::new(
            "smtp.dkim.domain",
            format!("{domain:?} is not a domain name"),
        ));
    }
    if !plausible(selector) {
        return Err(ConfigError::new(
            "smtp.dkim.selector",
            format!("{selector:?} is not a DNS label"),
        ));
    }
    let key_error = |reason: String| {
        ConfigError::new(
            "smtp.dkim.private_key_file",
            format!("{}: {reason}", file.display()),
        )
    };
    let pem =
        std::fs::read_to_string(file).map_err(|e| key_error(format!("cannot read it: {e}")))?;
    let dkim = crate::dkim::Dkim::load(domain, selector, &pem).map_err(key_error)?;
    // A second validation of the same settings keeps the first signer.
    let _ = d.loaded.set(dkim);
    Ok(())
}

fn positive(key: &str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        Err(ConfigError::new(key, "must be greater than zero"))
    } else {
        Ok(())
    }
}

fn at_least_one(key: &str, value: u32) -> Result<(), ConfigError> {
    if value == 0 {
        Err(ConfigError::new(key, "must be at least 1"))
    } else {
        Ok(())
    }
}
