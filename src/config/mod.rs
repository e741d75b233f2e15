//! Typed settings, loaded and validated once at start-up.
//!
//! Three layers, later ones winning: the defaults (`config/default.toml`,
//! compiled into the binary, the only place a default is written), the
//! user's file if one is named (`--config PATH` or `INVOICE_REMINDER_CONFIG`),
//! and environment variables `INVOICE_REMINDER__<SECTION>__<KEY>`. With no
//! file named, none is read: the binary runs from any directory.
//!
//! Values are deserialized straight into their types (durations, cron, time
//! zone, addresses, URLs with their connect options), and the rules across
//! keys are checked once ([`validate`]). Every problem is one [`ConfigError`]
//! line naming the key and where it came from; `main` exits 2 with it. The
//! rest of the crate never reads a raw string again. Secrets (the SMTP
//! password, passwords inside URLs) are never printed.

mod env;
mod error;
mod names;
mod types;
mod validate;

use std::path::PathBuf;
use std::time::Duration;

use chrono_tz::Tz;
use figment::Figment;
use figment::providers::{Format, Toml};
use lettre::message::Mailbox;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sqlx::postgres::PgConnectOptions;

use crate::stages::Stages;
pub use error::ConfigError;
pub use names::{RelationName, SqlName};
pub use types::{Cron, DatabaseUrl, RedisUrl, parse_cron, redact_url};

/// The defaults: every key, with its comment. Compiled in.
pub const DEFAULTS: &str = include_str!("../../config/default.toml");
/// Environment variable naming the configuration file (`--config` wins).
pub const CONFIG_PATH_ENV: &str = "INVOICE_REMINDER_CONFIG";
/// Prefix of per-key overrides: `INVOICE_REMINDER__LOCK__TTL=2s`.
pub const ENV_PREFIX: &str = "INVOICE_REMINDER__";
/// Separator between section and key in an override's name.
pub const ENV_SEPARATOR: &str = "__";
/// Largest accepted `reminders.batch_size`: one claim statement per batch,
/// and a batch bounds how many rows a SIGKILL can leave in `sending`.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// Where settings come from. `from_process` is what the binary uses; tests
/// (and the compose test) pass a file and an explicit environment.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// Explicit file (`--config`); `None` falls back to `INVOICE_REMINDER_CONFIG`
    /// in `env`, then to no file at all.
    pub path: Option<PathBuf>,
    /// Environment variables to consider (only `INVOICE_REMINDER_*` matter).
    pub env: Vec<(String, String)>,
}

impl ConfigSource {
    pub fn from_process(path: Option<PathBuf>) -> Self {
        Self {
            path,
            env: std::env::vars().collect(),
        }
    }

    /// The user's file, if one is named; an error if it does not exist.
    fn file(&self) -> Result<Option<PathBuf>, ConfigError> {
        let named = self.path.clone().or_else(|| {
            self.env
                .iter()
                .find(|(k, v)| k == CONFIG_PATH_ENV && !v.is_empty())
                .map(|(_, v)| PathBuf::from(v))
        });
        match named {
            Some(path) if !path.is_file() => Err(ConfigError::new(
                "",
                format!(
                    "config file {} not found (pass --config PATH or set {CONFIG_PATH_ENV})",
                    path.display()
                ),
            )),
            other => Ok(other),
        }
    }
}

/// The whole validated configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Names this process in logs, `job_runs` and `application_name`.
    /// Never decides lock ownership (tokens do), so duplicates are harmless.
    /// Default (unset or blank): `hostname-pid`.
    #[serde(
        default = "types::default_replica_id",
        deserialize_with = "types::replica_id"
    )]
    pub replica_id: String,
    pub database: DatabaseSettings,
    pub source: SourceSettings,
    pub redis: RedisSettings,
    pub schedule: ScheduleSettings,
    pub lock: LockSettings,
    pub reminders: ReminderSettings,
    pub templates: TemplateSettings,
    pub company: CompanySettings,
    pub http: HttpSettings,
    pub smtp: SmtpSettings,
    pub log: LogSettings,
    pub shutdown: ShutdownSettings,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    pub url: DatabaseUrl,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Client-side deadline of every database call (see `db::conn`).
    #[serde(with = "humantime_serde")]
    pub statement_timeout: Duration,
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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReminderSettings {
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
    pub send_concurrency: u32,
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
    /// A template (`https://pay.example.com/i/{{ invoice.number }}`).
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

impl Settings {
    /// Loads and validates; the first problem found is returned.
    pub fn load(source: &ConfigSource) -> Result<Self, ConfigError> {
        let file = source.file()?;
        let mut figment = Figment::from(Toml::string(DEFAULTS));
        if let Some(path) = &file {
            figment = figment.merge(Toml::file_exact(path));
        }
        let settings: Settings = figment
            .merge(env::EnvOverrides::new(&source.env))
            .extract()
            .map_err(|e| error::from_figment(e, file.as_deref()))?;
        validate::check(&settings)?;
        Ok(settings)
    }

    /// How long one tick may run before the replica counts as hung.
    /// `"auto"`: the larger of `shutdown.timeout` and 10 × the longest gap
    /// among the next 10 fires of `schedule.cron`, at most one hour.
    pub fn max_tick_duration(&self) -> Duration {
        const CAP: Duration = Duration::from_secs(3600);
        match self.schedule.max_tick_duration {
            MaxTickDuration::Fixed(limit) => limit,
            MaxTickDuration::Auto => {
                let now = chrono::Utc::now().with_timezone(&self.schedule.timezone);
                let fires: Vec<_> = self
                    .schedule
                    .cron
                    .parsed()
                    .iter_after(now)
                    .take(11)
                    .collect();
                let longest_gap = fires
                    .windows(2)
                    .filter_map(|w| (w[1] - w[0]).to_std().ok())
                    .max()
                    .unwrap_or(CAP);
                (longest_gap * 10).max(self.shutdown.timeout).min(CAP)
            }
        }
    }

    /// Options for one PostgreSQL connection, with `application_name` set to
    /// this replica so `pg_stat_activity` shows who is connected.
    ///
    /// `plan_cache_mode = force_custom_plan`: sqlx prepares every statement,
    /// and after a few executions PostgreSQL may switch a prepared statement
    /// to a generic plan that ignores the parameters. For the overdue page
    /// (`LIMIT $n`, a keyset cursor) a generic plan can be a full scan and
    /// sort per page, turning a backlog into quadratic work; planning each
    /// execution costs well under a millisecond.
    ///
    /// `idle_in_transaction_session_timeout`: see [`Settings::idle_in_transaction`].
    ///
    /// `jit = off`: the scan's per-row probes make PostgreSQL estimate a
    /// page at far above `jit_above_cost`, and compiling it (~8 ms) cost more
    /// than running it (~1 ms); these are short OLTP statements.
    ///
    /// Behind a transaction pooler no startup option is sent (PgBouncer
    /// refuses unknown ones): `extra_float_digits` is left out (we read no
    /// floats that need it) and `jit` is set per transaction instead;
    /// unnamed statements are always planned with their parameters.
    pub fn pg_connect_options(&self) -> PgConnectOptions {
        let options = self
            .database
            .url
            .options()
            .clone()
            .application_name(&application_name(&self.replica_id))
            .extra_float_digits(None);
        match self.database.pooler {
            Pooler::None => options.options([
                ("plan_cache_mode", "force_custom_plan".to_owned()),
                ("jit", "off".to_owned()),
                (
                    "idle_in_transaction_session_timeout",
                    self.idle_in_transaction(),
                ),
            ]),
            Pooler::Transaction => options,
        }
    }

    /// A transaction of ours left idle this long (its process paused or
    /// hung mid-claim) is ended by the server, so it cannot block the
    /// others' claims any longer than a statement may take.
    pub fn idle_in_transaction(&self) -> String {
        format!("{}ms", self.database.statement_timeout.as_millis())
    }
}

/// `application_name` is limited to 63 bytes by PostgreSQL.
fn application_name(replica_id: &str) -> String {
    let mut name = format!("invoice-reminder/{replica_id}");
    while name.len() > 63 {
        name.pop();
    }
    name
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_defaults_load_without_a_file() {
        let settings = Settings::load(&ConfigSource::default());
        assert!(settings.is_ok(), "{:?}", settings.err());
    }

    #[test]
    fn application_name_fits_postgres_limit() {
        let long = "x".repeat(100);
        assert!(application_name(&long).len() <= 63);
        assert_eq!(application_name("a"), "invoice-reminder/a");
    }
}
