//! The sections of [`Settings`](super::Settings), one struct per TOML table.
//! Every field is required here: its default is in `config/default.toml`,
//! the only place a default is written, so a value can never silently come
//! from two places.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono_tz::Tz;
use lettre::message::Mailbox;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::names::{RelationName, SqlName};
use super::types::{self, Cron};
use super::urls::{DatabaseUrl, RedisUrl, redact_url};
use crate::stages::Stages;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    pub url: DatabaseUrl,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Client-side deadline of every database call of a tick (see
    /// `db::conn`).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// The same deadline for the operator's commands (`seed`, `audit`,
    /// `check-source`, `status`, `settle`, `preview`), whose statements read
    /// or write whole tables and are long by nature.
    #[serde(with = "humantime_serde")]
    pub command_timeout: Duration,
    pub pooler: Pooler,
    /// Where our tables live (`reminders`, `job_runs`, ..., the demo tables
    /// and the default source view); created by `migrate`.
    pub schema: SqlName,
}

/// `[source]`: where the invoices that may owe a reminder come from.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    /// The relation (usually a view) with the source contract's columns;
    /// unqualified: in `database.schema`.
    pub relation: RelationName,
}

/// What sits between the worker and PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooler {
    /// A direct connection (or a session-mode pooler).
    None,
    /// A transaction-mode pooler (PgBouncer `pool_mode = transaction`,
    /// Supabase, Neon, Heroku): no session state between transactions.
    Transaction,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    pub url: RedisUrl,
    /// Connect and response timeout; a reply that takes longer is treated as
    /// lost (an ambiguous result for `SET NX`).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSettings {
    pub cron: Cron,
    #[serde(deserialize_with = "types::timezone")]
    pub timezone: Tz,
    /// See [`Settings::max_tick_duration`].
    pub max_tick_duration: MaxTickDuration,
}

/// `schedule.max_tick_duration`: a duration, or `"auto"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxTickDuration {
    Auto,
    Fixed(Duration),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Where `/healthz`, `/readyz` and `/metrics` are served; None: off.
    #[serde(deserialize_with = "types::optional_socket_addr")]
    pub listen: Option<std::net::SocketAddr>,
    /// Where `POST /webhooks/bounces` is served instead of on `listen`,
    /// so `/metrics` and `/readyz` can stay private; None: on `listen`.
    #[serde(deserialize_with = "types::optional_socket_addr")]
    pub webhook_listen: Option<std::net::SocketAddr>,
    /// Open connections per listener (see `http::listener`).
    pub max_connections: u32,
    /// A request's start line and headers must arrive within this, and
    /// so must the next request on a kept-alive connection.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A webhook request's body must arrive within this (408 after).
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// The longest start line and headers of one request (431 beyond).
    pub max_header_bytes: u32,
    /// The Standard Webhooks secret (`whsec_` and the base64 key) that
    /// signs requests to `POST /webhooks/bounces`; None: signed requests
    /// are refused (and, without `webhook_basic_auth`, the route is off).
    #[serde(deserialize_with = "types::optional_secret")]
    pub webhook_secret: Option<SecretString>,
    /// `user:password` that Postmark's bounce webhook presents with HTTP
    /// basic auth; None: such requests are refused.
    #[serde(deserialize_with = "types::optional_secret")]
    pub webhook_basic_auth: Option<SecretString>,
}

impl HttpSettings {
    /// Whether `POST /webhooks/bounces` is served: only with
    /// `webhook_secret` (Postmark's basic auth is a second way in, never
    /// the switch; validation refuses it alone).
    pub fn webhook_enabled(&self) -> bool {
        self.webhook_secret.is_some()
    }

    /// Where the webhook is served: `webhook_listen`, else `listen`.
    pub fn webhook_addr(&self) -> Option<std::net::SocketAddr> {
        self.webhook_listen.or(self.listen)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockSettings {
    pub backend: LockBackendKind,
    /// The exact Redis key (its value is the holder's token), or what the
    /// PostgreSQL advisory lock id is hashed from.
    #[serde(deserialize_with = "types::string_like")]
    pub key: String,
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    #[serde(with = "humantime_serde")]
    pub renew_every: Duration,
    #[serde(with = "humantime_serde")]
    pub min_hold: Duration,
    pub on_backend_error: OnBackendError,
}

/// Which service holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockBackendKind {
    Redis,
    Postgres,
}

/// What a tick does when the lock backend cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBackendError {
    /// Log one error and skip the tick (send nothing) until it is back.
    Skip,
    /// Work anyway, protected by the database's UNIQUE claim alone.
    DatabaseOnly,
}

/// What one mail covers (`reminders.group_by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// One mail per (invoice, step): the stage's own template.
    Invoice,
    /// One mail per customer and tick, listing every invoice of that
    /// customer that owes a step today (the `statement` template); the
    /// source needs a `customer_id` column.
    Customer,
}

impl GroupBy {
    /// Mails are statements (a template and a source column of their
    /// own): the source's `customer_id` is read, and the `statement`
    /// template must exist.
    pub fn statements(self) -> bool {
        self == Self::Customer
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReminderSettings {
    /// One mail per invoice (default) or per customer.
    pub group_by: GroupBy,
    /// Customer mode: at most this many invoices in one mail, oldest due
    /// date first; the rest go on the next tick.
    #[serde(deserialize_with = "types::at_least_one")]
    pub max_invoices_per_mail: NonZeroUsize,
    /// `[[reminders.stages]]`: what is sent when (see `crate::stages`).
    #[serde(deserialize_with = "types::stages")]
    pub stages: Stages,
    /// No step is claimed within this many days of a reminder `sent` or
    /// `sending` for the same invoice; 0: no gap.
    pub min_days_between: u32,
    /// First wait before a failed reminder is retried; doubles per attempt.
    #[serde(with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// The longest wait between attempts.
    #[serde(with = "humantime_serde")]
    pub retry_backoff_max: Duration,
    /// Unknown deliveries older than this are sent again (same Message-ID);
    /// None (`""`): never, the default.
    #[serde(deserialize_with = "types::optional_duration")]
    pub resend_unknown_after: Option<Duration>,
    pub batch_size: u32,
    pub max_attempts: u32,
    /// Letters sent at once, and at most marked started and not yet
    /// written to a connection (what a `kill -9` can leave unknown).
    #[serde(deserialize_with = "types::at_least_one")]
    pub send_concurrency: NonZeroUsize,
    /// At most this many reminders claimed per tick; None: no limit (0).
    #[serde(deserialize_with = "types::zero_is_none")]
    pub max_per_tick: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSettings {
    /// Your templates, over the built-in ones; None: built-in only.
    #[serde(deserialize_with = "types::optional_path")]
    pub dir: Option<PathBuf>,
    /// Used when a customer's locale (or its language) has no template.
    #[serde(deserialize_with = "types::string_like")]
    pub default_locale: String,
}

/// `[company]`: who the reminders come from, for templates and headers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompanySettings {
    #[serde(deserialize_with = "types::string_like")]
    pub name: String,
    /// The Reply-To header; None: replies go to `smtp.from`.
    #[serde(deserialize_with = "types::optional_mailbox")]
    pub reply_to: Option<Mailbox>,
    #[serde(deserialize_with = "types::optional_string")]
    pub support_email: Option<String>,
    /// A template (`https://pay.example.com/i/{{ invoice.number }}`) whose
    /// values are percent-encoded; see `mail::links`.
    #[serde(deserialize_with = "types::optional_string")]
    pub payment_url: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    None,
    Starttls,
    Tls,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    #[serde(deserialize_with = "types::string_like")]
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    /// Empty in the file: None.
    #[serde(deserialize_with = "types::optional_string")]
    pub username: Option<String>,
    #[serde(deserialize_with = "types::optional_secret")]
    pub password: Option<SecretString>,
    #[serde(deserialize_with = "types::mailbox")]
    pub from: Mailbox,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    #[serde(deserialize_with = "types::domain")]
    pub message_id_domain: String,
    /// PEM certificates trusted for TLS in addition to the public roots.
    #[serde(deserialize_with = "types::optional_path")]
    pub ca_file: Option<PathBuf>,
    pub pool_size: u32,
    /// At most this many messages started per second per replica; None: no limit (0).
    #[serde(deserialize_with = "types::zero_is_none")]
    pub max_per_second: Option<u32>,
    /// `[smtp.dkim]`: signing every message; off while all three keys are empty.
    pub dkim: DkimSettings,
}

impl SmtpSettings {
    /// The relay as the learnt rate is stored under (`relay_pace.relay`).
    pub fn relay(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// `[smtp.dkim]`. Validation reads and checks the key once (exit 2 naming
/// `smtp.dkim.private_key_file`) and keeps the signer built from it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DkimSettings {
    /// `d=`: the domain that vouches for the message (usually `smtp.from`'s).
    #[serde(deserialize_with = "types::optional_string")]
    pub domain: Option<String>,
    /// `s=`: the DNS record is `<selector>._domainkey.<domain>`.
    #[serde(deserialize_with = "types::optional_string")]
    pub selector: Option<String>,
    /// PEM: RSA (2048 bits or more) or Ed25519.
    #[serde(deserialize_with = "types::optional_path")]
    pub private_key_file: Option<PathBuf>,
    /// Set once by validation when DKIM is on; shared by every clone.
    #[serde(skip)]
    pub(super) loaded: Arc<OnceLock<crate::dkim::Dkim>>,
}

impl DkimSettings {
    /// The key and the signer, when DKIM is on.
    pub fn loaded(&self) -> Option<&crate::dkim::Dkim> {
        self.loaded.get()
    }
}

/// `[archive]`: keeping each sent message's bytes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSettings {
    pub store: ArchiveStore,
    /// Archived messages older than this many days are deleted by the tick.
    pub keep_days: u32,
}

/// Where sent messages are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArchiveStore {
    /// Nowhere: only the reply and the SHA-256 on the reminder row.
    None,
    /// Compressed, in a table of their own (`message_archive`).
    Database,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// An `EnvFilter` directive, e.g. `info` or `invoice_reminder=debug,info`.
    #[serde(deserialize_with = "types::string_like")]
    pub level: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
    /// How long SIGTERM waits for the tick in flight before giving up.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl DatabaseSettings {
    /// The URL with any password replaced by `***`, safe to print.
    pub fn redacted_url(&self) -> String {
        redact_url(self.url.expose_secret())
    }
}

impl RedisSettings {
    pub fn redacted_url(&self) -> String {
        redact_url(self.url.expose_secret())
    }
}
