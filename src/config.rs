//! Typed settings, loaded and validated once at start-up.
//!
//! Three layers, later ones winning: built-in defaults, one TOML file
//! (`config/default.toml`, or `--config PATH` / `INVOICE_REMINDER_CONFIG`),
//! and environment variables `INVOICE_REMINDER__<SECTION>__<KEY>`.
//!
//! Everything that can be wrong with a configuration is found here, before
//! anything connects: unknown keys, bad durations, cron expressions,
//! time zones, addresses, URLs and cross-key rules such as
//! `lock.renew_every < lock.ttl`. Each problem becomes one [`ConfigError`]
//! line naming the key (and the file or environment variable it came from).
//! The rest of the crate receives parsed values (`Duration`, `Tz`,
//! `Mailbox`, connect options) and never reads a raw string again.
//!
//! Secrets (the SMTP password and any password inside the database or Redis
//! URL) are held as [`SecretString`] and are never printed: `Debug` of the
//! settings and every error message here redact them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use chrono_tz::Tz;
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use lettre::message::Mailbox;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::postgres::PgConnectOptions;

/// Where the configuration file is looked for when none is given.
pub const DEFAULT_CONFIG_PATH: &str = "config/default.toml";
/// Environment variable naming the configuration file (`--config` wins).
pub const CONFIG_PATH_ENV: &str = "INVOICE_REMINDER_CONFIG";
/// Prefix of per-key overrides: `INVOICE_REMINDER__LOCK__TTL=2s`.
pub const ENV_PREFIX: &str = "INVOICE_REMINDER__";
/// Separator between section and key in an override's name.
pub const ENV_SEPARATOR: &str = "__";

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/invoice_reminder";
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_CRON: &str = "0 */5 * * * *";
pub const DEFAULT_LOCK_KEY: &str = "invoice-reminder:lock";
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(30);
pub const DEFAULT_RENEW_EVERY: Duration = Duration::from_secs(10);
pub const DEFAULT_MIN_HOLD: Duration = Duration::from_secs(5);
pub const DEFAULT_GRACE_DAYS: u32 = 3;
pub const DEFAULT_BATCH_SIZE: u32 = 500;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub const DEFAULT_SEND_CONCURRENCY: u32 = 8;
pub const DEFAULT_SMTP_HOST: &str = "127.0.0.1";
pub const DEFAULT_SMTP_PORT: u16 = 1025;
pub const DEFAULT_SMTP_FROM: &str = "Billing <billing@example.com>";
pub const DEFAULT_SMTP_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_SMTP_POOL_SIZE: u32 = 8;
pub const DEFAULT_MESSAGE_ID_DOMAIN: &str = "invoice-reminder.example.com";
pub const DEFAULT_LOG_LEVEL: &str = "info";
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);

/// Largest accepted `reminders.batch_size`: one claim statement per batch,
/// and a batch bounds how many rows a SIGKILL can leave in `sending`.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// One configuration problem: the key, the reason, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key (`lock.ttl`), or empty when the problem is the file itself.
    pub key: String,
    pub reason: String,
    /// "config/default.toml" or "environment variable INVOICE_REMINDER__LOCK__TTL".
    pub source: Option<String>,
}

impl ConfigError {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
            source: None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.reason)?;
        } else {
            write!(f, "{}: {}", self.key, self.reason)?;
        }
        if let Some(source) = &self.source {
            write!(f, " (from {source})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Where settings come from. `from_process` is what the binary uses; tests
/// (and the compose test) pass a file and an explicit environment.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// Explicit file (`--config`); `None` falls back to `INVOICE_REMINDER_CONFIG`
    /// in `env`, then to [`DEFAULT_CONFIG_PATH`].
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

    fn resolved_path(&self) -> PathBuf {
        if let Some(path) = &self.path {
            return path.clone();
        }
        self.env
            .iter()
            .find(|(k, v)| k == CONFIG_PATH_ENV && !v.is_empty())
            .map(|(_, v)| PathBuf::from(v))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH))
    }
}

/// The whole validated configuration.
#[derive(Clone)]
pub struct Settings {
    /// Names this process in logs, `job_runs` and `application_name`.
    /// Never decides lock ownership (tokens do), so duplicates are harmless.
    pub replica_id: String,
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub schedule: ScheduleSettings,
    pub lock: LockSettings,
    pub reminders: ReminderSettings,
    pub smtp: SmtpSettings,
    pub log: LogSettings,
    pub shutdown: ShutdownSettings,
}

#[derive(Clone)]
pub struct DatabaseSettings {
    pub url: SecretString,
    pub max_connections: u32,
    pub connect_timeout: Duration,
    options: PgConnectOptions,
}

#[derive(Clone)]
pub struct RedisSettings {
    pub url: SecretString,
    /// Connect and response timeout; a reply that takes longer is treated as
    /// lost (an ambiguous result for `SET NX`).
    pub timeout: Duration,
}

#[derive(Clone, Debug)]
pub struct ScheduleSettings {
    /// The expression as written, handed to tokio-cron-scheduler.
    pub cron: String,
    pub timezone: Tz,
}

#[derive(Clone, Debug)]
pub struct LockSettings {
    pub backend: LockBackendKind,
    /// The exact Redis key (its value is the holder's token), or what the
    /// PostgreSQL advisory lock id is hashed from.
    pub key: String,
    pub ttl: Duration,
    pub renew_every: Duration,
    pub min_hold: Duration,
    pub on_backend_error: OnBackendError,
}

/// Which service holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockBackendKind {
    Redis,
    Postgres,
}

/// What a tick does when the lock backend cannot be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBackendError {
    /// Log one error and skip the tick (send nothing) until it is back.
    Skip,
    /// Work anyway, protected by the database's UNIQUE claim alone.
    DatabaseOnly,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cadence {
    Daily,
    Weekly,
    Monthly,
}

#[derive(Clone, Debug)]
pub struct ReminderSettings {
    pub cadence: Cadence,
    pub grace_days: u32,
    pub batch_size: u32,
    pub max_attempts: u32,
    pub send_concurrency: u32,
    /// At most this many reminders claimed per tick; None: no limit.
    pub max_per_tick: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpTls {
    None,
    Starttls,
    Tls,
}

#[derive(Clone)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub username: Option<String>,
    pub password: Option<SecretString>,
    pub from: Mailbox,
    pub timeout: Duration,
    pub message_id_domain: String,
    pub pool_size: u32,
    /// At most this many messages started per second per replica; None: no limit.
    pub max_per_second: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

#[derive(Clone, Debug)]
pub struct LogSettings {
    pub format: LogFormat,
    /// An `EnvFilter` directive, e.g. `info` or `invoice_reminder=debug,info`.
    pub level: String,
}

#[derive(Clone, Debug)]
pub struct ShutdownSettings {
    /// How long SIGTERM waits for the tick in flight before giving up.
    pub timeout: Duration,
}

impl Settings {
    /// Loads and validates; the first problem found is returned.
    pub fn load(source: &ConfigSource) -> Result<Self, ConfigError> {
        let path = source.resolved_path();
        let raw = load_raw(&path, &source.env)?;
        raw.validate()
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
    pub fn pg_connect_options(&self) -> PgConnectOptions {
        self.database
            .options
            .clone()
            .application_name(&application_name(&self.replica_id))
            .options([("plan_cache_mode", "force_custom_plan")])
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

impl ReminderSettings {
    /// Invoices due before this date are overdue on `today`.
    pub fn overdue_cutoff(&self, today: chrono::NaiveDate) -> chrono::NaiveDate {
        today - chrono::Days::new(u64::from(self.grace_days))
    }
}

/// Replaces the password part of `scheme://user:password@host` with `***`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    let redacted_userinfo = match userinfo.find(':') {
        Some(colon) => format!("{}:***", &userinfo[..colon]),
        None => userinfo.to_owned(),
    };
    format!(
        "{}{}{}",
        &url[..scheme_end + 3],
        redacted_userinfo,
        &rest[at..]
    )
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("replica_id", &self.replica_id)
            .field("database.url", &self.database.redacted_url())
            .field("database.max_connections", &self.database.max_connections)
            .field("redis.url", &self.redis.redacted_url())
            .field("schedule", &self.schedule)
            .field("lock", &self.lock)
            .field("reminders", &self.reminders)
            .field("smtp.host", &self.smtp.host)
            .field("smtp.port", &self.smtp.port)
            .field("smtp.tls", &self.smtp.tls)
            .field("smtp.username", &self.smtp.username)
            .field("smtp.password", &self.smtp.password.as_ref().map(|_| "***"))
            .field("smtp.from", &self.smtp.from.to_string())
            .field("log", &self.log)
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Raw layer: what serde reads. Unknown keys are errors; missing keys default.
// ---------------------------------------------------------------------------

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSettings {
    #[serde(
        default,
        deserialize_with = "string_like_opt",
        skip_serializing_if = "Option::is_none"
    )]
    replica_id: Option<String>,
    database: RawDatabase,
    redis: RawRedis,
    schedule: RawSchedule,
    lock: RawLock,
    reminders: RawReminders,
    smtp: RawSmtp,
    log: RawLog,
    shutdown: RawShutdown,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDatabase {
    #[serde(deserialize_with = "string_like")]
    url: String,
    max_connections: u32,
    #[serde(with = "humantime_serde")]
    connect_timeout: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRedis {
    #[serde(deserialize_with = "string_like")]
    url: String,
    #[serde(with = "humantime_serde")]
    timeout: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSchedule {
    #[serde(deserialize_with = "string_like")]
    cron: String,
    #[serde(deserialize_with = "string_like")]
    timezone: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLock {
    backend: LockBackendKind,
    #[serde(deserialize_with = "string_like")]
    key: String,
    #[serde(with = "humantime_serde")]
    ttl: Duration,
    #[serde(with = "humantime_serde")]
    renew_every: Duration,
    #[serde(with = "humantime_serde")]
    min_hold: Duration,
    on_backend_error: OnBackendError,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawReminders {
    cadence: Cadence,
    grace_days: u32,
    batch_size: u32,
    max_attempts: u32,
    send_concurrency: u32,
    max_per_tick: u32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawSmtp {
    #[serde(deserialize_with = "string_like")]
    host: String,
    port: u16,
    tls: SmtpTls,
    #[serde(deserialize_with = "string_like")]
    username: String,
    #[serde(deserialize_with = "string_like")]
    password: String,
    #[serde(deserialize_with = "string_like")]
    from: String,
    #[serde(with = "humantime_serde")]
    timeout: Duration,
    #[serde(deserialize_with = "string_like")]
    message_id_domain: String,
    pool_size: u32,
    max_per_second: u32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLog {
    format: LogFormat,
    #[serde(deserialize_with = "string_like")]
    level: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawShutdown {
    #[serde(with = "humantime_serde")]
    timeout: Duration,
}

impl Default for RawDatabase {
    fn default() -> Self {
        Self {
            url: DEFAULT_DATABASE_URL.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl Default for RawRedis {
    fn default() -> Self {
        Self {
            url: DEFAULT_REDIS_URL.into(),
            timeout: DEFAULT_REDIS_TIMEOUT,
        }
    }
}

impl Default for RawSchedule {
    fn default() -> Self {
        Self {
            cron: DEFAULT_CRON.into(),
            timezone: "UTC".into(),
        }
    }
}

impl Default for RawLock {
    fn default() -> Self {
        Self {
            backend: LockBackendKind::Redis,
            key: DEFAULT_LOCK_KEY.into(),
            ttl: DEFAULT_LOCK_TTL,
            renew_every: DEFAULT_RENEW_EVERY,
            min_hold: DEFAULT_MIN_HOLD,
            on_backend_error: OnBackendError::Skip,
        }
    }
}

impl Default for RawReminders {
    fn default() -> Self {
        Self {
            cadence: Cadence::Daily,
            grace_days: DEFAULT_GRACE_DAYS,
            batch_size: DEFAULT_BATCH_SIZE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            send_concurrency: DEFAULT_SEND_CONCURRENCY,
            max_per_tick: 0,
        }
    }
}

impl Default for RawSmtp {
    fn default() -> Self {
        Self {
            host: DEFAULT_SMTP_HOST.into(),
            port: DEFAULT_SMTP_PORT,
            tls: SmtpTls::None,
            username: String::new(),
            password: String::new(),
            from: DEFAULT_SMTP_FROM.into(),
            timeout: DEFAULT_SMTP_TIMEOUT,
            message_id_domain: DEFAULT_MESSAGE_ID_DOMAIN.into(),
            pool_size: DEFAULT_SMTP_POOL_SIZE,
            max_per_second: 0,
        }
    }
}

impl Default for RawLog {
    fn default() -> Self {
        Self {
            format: LogFormat::Pretty,
            level: DEFAULT_LOG_LEVEL.into(),
        }
    }
}

impl Default for RawShutdown {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}

/// Accepts a string, or a number/bool that an environment variable was
/// parsed into (`INVOICE_REMINDER__SMTP__PASSWORD=12345`), as a string.
fn string_like<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StringLike {
        S(String),
        I(i64),
        U(u64),
        F(f64),
        B(bool),
    }
    Ok(match StringLike::deserialize(de)? {
        StringLike::S(s) => s,
        StringLike::I(i) => i.to_string(),
        StringLike::U(u) => u.to_string(),
        StringLike::F(f) => f.to_string(),
        StringLike::B(b) => b.to_string(),
    })
}

fn string_like_opt<'de, D: Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    string_like(de).map(Some)
}

fn load_raw(path: &Path, env: &[(String, String)]) -> Result<RawSettings, ConfigError> {
    if !path.is_file() {
        return Err(ConfigError::new(
            "",
            format!(
                "config file {} not found (pass --config PATH or set {CONFIG_PATH_ENV})",
                path.display()
            ),
        ));
    }
    let figment = Figment::from(Serialized::defaults(RawSettings::default()))
        .merge(Toml::file_exact(path))
        .merge(EnvOverrides::new(env));
    figment
        .extract::<RawSettings>()
        .map_err(|e| figment_error(e, path))
}

/// Turns figment's error into one line naming the key and its source.
fn figment_error(error: figment::Error, path: &Path) -> ConfigError {
    use figment::error::Kind;
    let key = error.path.join(".");
    let reason = match &error.kind {
        Kind::UnknownField(field, _) => {
            // figment's path already ends with the unknown field.
            let full = if error.path.last() == Some(field) || key.is_empty() {
                if key.is_empty() {
                    field.clone()
                } else {
                    key.clone()
                }
            } else {
                format!("{key}.{field}")
            };
            return with_source(ConfigError::new(full, "unknown key"), &error, path);
        }
        Kind::Message(msg) if key.is_empty() => {
            // TOML syntax errors arrive as messages without a key.
            return ConfigError {
                key: String::new(),
                reason: format!("cannot parse {}: {}", path.display(), one_line(msg)),
                source: None,
            };
        }
        other => other.to_string(),
    };
    with_source(ConfigError::new(key, reason), &error, path)
}

fn with_source(mut err: ConfigError, error: &figment::Error, path: &Path) -> ConfigError {
    err.source = match &error.metadata {
        Some(md) if md.name.starts_with("environment") => {
            let parts: Vec<&str> = err.key.split('.').collect();
            Some(format!(
                "environment variable {ENV_PREFIX}{}",
                parts
                    .iter()
                    .map(|p| p.to_uppercase())
                    .collect::<Vec<_>>()
                    .join(ENV_SEPARATOR)
            ))
        }
        Some(md) if md.name.contains("TOML") => Some(path.display().to_string()),
        _ => None,
    };
    err
}

/// `INVOICE_REMINDER__<SECTION>__<KEY>` variables from an explicit list, so
/// tests can load settings exactly as a container's environment gives them.
struct EnvOverrides {
    values: Dict,
}

impl EnvOverrides {
    fn new(env: &[(String, String)]) -> Self {
        let mut values = Dict::new();
        for (name, raw) in env {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let parts: Vec<String> = rest
                .split(ENV_SEPARATOR)
                .map(|p| p.to_ascii_lowercase())
                .collect();
            if parts.iter().any(|p| p.is_empty()) {
                continue;
            }
            // Same heuristics as figment's Env provider: "10" is a number,
            // "true" a bool, "2s" a string.
            let value = Value::from_str(raw).unwrap_or_else(|_| Value::from(raw.clone()));
            insert_nested(&mut values, &parts, value);
        }
        Self { values }
    }
}

fn insert_nested(dict: &mut Dict, parts: &[String], value: Value) {
    match parts {
        [] => {}
        [last] => {
            dict.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry(first.clone())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                insert_nested(inner, rest, value);
            } else {
                let mut inner = Dict::new();
                insert_nested(&mut inner, rest, value);
                *entry = Value::from(inner);
            }
        }
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment variable(s)")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}

// ---------------------------------------------------------------------------
// Validation: raw strings into typed values, plus cross-key rules.
// ---------------------------------------------------------------------------

impl RawSettings {
    fn validate(self) -> Result<Settings, ConfigError> {
        let replica_id = match self.replica_id {
            Some(id) if !id.trim().is_empty() => id,
            _ => default_replica_id(),
        };
        if replica_id.chars().any(char::is_control) || replica_id.len() > 200 {
            return Err(ConfigError::new(
                "replica_id",
                "must be at most 200 characters without control characters",
            ));
        }

        let db = self.database;
        if !(db.url.starts_with("postgres://") || db.url.starts_with("postgresql://")) {
            return Err(ConfigError::new(
                "database.url",
                format!(
                    "not a PostgreSQL URL ({}): it must start with postgres:// or postgresql://",
                    redact_url(&db.url)
                ),
            ));
        }
        let options = PgConnectOptions::from_str(&db.url).map_err(|e| {
            ConfigError::new(
                "database.url",
                format!(
                    "not a valid PostgreSQL URL ({}): {}",
                    redact_url(&db.url),
                    scrub(&e.to_string(), &db.url)
                ),
            )
        })?;
        if db.max_connections == 0 {
            return Err(ConfigError::new(
                "database.max_connections",
                "must be at least 1",
            ));
        }
        require_positive("database.connect_timeout", db.connect_timeout)?;

        let redis = self.redis;
        if let Err(e) = redis::Client::open(redis.url.as_str()) {
            return Err(ConfigError::new(
                "redis.url",
                format!(
                    "not a valid Redis URL ({}): {}",
                    redact_url(&redis.url),
                    scrub(&e.to_string(), &redis.url)
                ),
            ));
        }
        require_positive("redis.timeout", redis.timeout)?;

        let schedule = self.schedule;
        parse_cron(&schedule.cron).map_err(|reason| ConfigError::new("schedule.cron", reason))?;
        let timezone: Tz = schedule.timezone.parse().map_err(|_| {
            ConfigError::new(
                "schedule.timezone",
                format!(
                    "unknown time zone {:?} (use an IANA name such as \"UTC\" or \"Europe/Madrid\")",
                    schedule.timezone
                ),
            )
        })?;

        let lock = self.lock;
        if lock.key.trim().is_empty() {
            return Err(ConfigError::new("lock.key", "must not be empty"));
        }
        require_positive("lock.ttl", lock.ttl)?;
        require_positive("lock.renew_every", lock.renew_every)?;
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
        if redis.timeout >= lock.ttl {
            return Err(ConfigError::new(
                "redis.timeout",
                format!(
                    "must be shorter than lock.ttl ({} >= {}), or a renewal cannot finish before the lease lapses",
                    humantime::format_duration(redis.timeout),
                    humantime::format_duration(lock.ttl)
                ),
            ));
        }

        let rem = self.reminders;
        if rem.batch_size == 0 || rem.batch_size > MAX_BATCH_SIZE {
            return Err(ConfigError::new(
                "reminders.batch_size",
                format!("must be between 1 and {MAX_BATCH_SIZE}"),
            ));
        }
        if rem.max_attempts == 0 {
            return Err(ConfigError::new(
                "reminders.max_attempts",
                "must be at least 1",
            ));
        }
        if rem.send_concurrency == 0 {
            return Err(ConfigError::new(
                "reminders.send_concurrency",
                "must be at least 1",
            ));
        }
        if rem.grace_days > 36_500 {
            return Err(ConfigError::new(
                "reminders.grace_days",
                "must be at most 36500",
            ));
        }

        let smtp = self.smtp;
        if smtp.host.trim().is_empty() {
            return Err(ConfigError::new("smtp.host", "must not be empty"));
        }
        if smtp.port == 0 {
            return Err(ConfigError::new("smtp.port", "must be between 1 and 65535"));
        }
        let from: Mailbox = smtp.from.parse().map_err(|e| {
            ConfigError::new(
                "smtp.from",
                format!("not a valid address {:?}: {e}", smtp.from),
            )
        })?;
        require_positive("smtp.timeout", smtp.timeout)?;
        validate_domain(&smtp.message_id_domain)
            .map_err(|reason| ConfigError::new("smtp.message_id_domain", reason))?;
        if smtp.pool_size == 0 {
            return Err(ConfigError::new("smtp.pool_size", "must be at least 1"));
        }
        let username = Some(smtp.username).filter(|u| !u.is_empty());
        let password = Some(smtp.password)
            .filter(|p| !p.is_empty())
            .map(SecretString::from);
        if password.is_some() != username.is_some() {
            return Err(ConfigError::new(
                "smtp.username",
                "smtp.username and smtp.password must be set together",
            ));
        }

        let log = self.log;
        tracing_subscriber::EnvFilter::try_new(&log.level).map_err(|e| {
            ConfigError::new(
                "log.level",
                format!("not a valid level or filter {:?}: {e}", log.level),
            )
        })?;

        require_positive("shutdown.timeout", self.shutdown.timeout)?;

        Ok(Settings {
            replica_id,
            database: DatabaseSettings {
                url: SecretString::from(db.url),
                max_connections: db.max_connections,
                connect_timeout: db.connect_timeout,
                options,
            },
            redis: RedisSettings {
                url: SecretString::from(redis.url),
                timeout: redis.timeout,
            },
            schedule: ScheduleSettings {
                cron: schedule.cron,
                timezone,
            },
            lock: LockSettings {
                backend: lock.backend,
                key: lock.key,
                ttl: lock.ttl,
                renew_every: lock.renew_every,
                min_hold: lock.min_hold,
                on_backend_error: lock.on_backend_error,
            },
            reminders: ReminderSettings {
                cadence: rem.cadence,
                grace_days: rem.grace_days,
                batch_size: rem.batch_size,
                max_attempts: rem.max_attempts,
                send_concurrency: rem.send_concurrency,
                max_per_tick: Some(rem.max_per_tick).filter(|n| *n > 0),
            },
            smtp: SmtpSettings {
                host: smtp.host,
                port: smtp.port,
                tls: smtp.tls,
                username,
                password,
                from,
                timeout: smtp.timeout,
                message_id_domain: smtp.message_id_domain,
                pool_size: smtp.pool_size,
                max_per_second: Some(smtp.max_per_second).filter(|n| *n > 0),
            },
            log: LogSettings {
                format: log.format,
                level: log.level,
            },
            shutdown: ShutdownSettings {
                timeout: self.shutdown.timeout,
            },
        })
    }
}

/// Squeezes a multi-line parser message (with a source excerpt) into one
/// line: "TOML parse error at line 1, column 6: invalid table header; ...".
fn one_line(msg: &str) -> String {
    let mut parts = msg.lines().map(str::trim).filter(|line| {
        !line.is_empty()
            && !line.starts_with('|')
            && line
                .split_once('|')
                .is_none_or(|(n, _)| n.trim().parse::<u32>().is_err())
    });
    let head = parts.next().unwrap_or_default().to_owned();
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() {
        head
    } else {
        format!("{head}: {}", rest.join("; "))
    }
}

/// Parses a cron expression exactly as tokio-cron-scheduler will: six
/// fields with seconds first, day-of-month AND day-of-week.
pub fn parse_cron(expr: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(expr)
        .map_err(|e| {
            format!(
                "not a valid cron expression {expr:?}: {e} (6 fields, seconds first, e.g. \"0 */5 * * * *\")"
            )
        })
}

fn require_positive(key: &str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        Err(ConfigError::new(key, "must be greater than zero"))
    } else {
        Ok(())
    }
}

fn validate_domain(domain: &str) -> Result<(), String> {
    let ok = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "not a valid domain {domain:?} (letters, digits, '-' and '.' only)"
        ))
    }
}

/// Removes the URL (which may hold a password) from a parser's message.
fn scrub(message: &str, url: &str) -> String {
    if url.is_empty() {
        message.to_owned()
    } else {
        message.replace(url, &redact_url(url))
    }
}

/// `hostname-pid`: distinct per process on one host, readable in logs.
pub fn default_replica_id() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Every key the loader accepts, for documentation and completeness tests.
pub fn known_keys() -> Vec<String> {
    let value = match figment::providers::Serialized::defaults(RawSettings::default()).data() {
        Ok(map) => map,
        Err(_) => return Vec::new(),
    };
    let mut keys = Vec::new();
    fn walk(prefix: &str, dict: &Dict, keys: &mut Vec<String>) {
        for (k, v) in dict {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                Value::Dict(_, inner) => walk(&key, inner, keys),
                _ => keys.push(key),
            }
        }
    }
    if let Some(dict) = value.get(&Profile::Default) {
        walk("", dict, &mut keys);
    }
    // `replica_id` defaults to None and is therefore absent from the dump.
    keys.push("replica_id".into());
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_the_password_only() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            redact_url("redis://:pw@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn cron_needs_six_fields_with_seconds_first() {
        assert!(parse_cron("*/2 * * * * *").is_ok());
        assert!(parse_cron("*/5 * * * *").is_err());
        assert!(parse_cron("not cron").is_err());
    }

    #[test]
    fn parser_messages_become_one_line() {
        let msg = "TOML parse error at line 1, column 6\n  |\n1 | [lock\n  |      ^\ninvalid table header\nexpected `.`, `]`\n";
        assert_eq!(
            one_line(msg),
            "TOML parse error at line 1, column 6: invalid table header; expected `.`, `]`"
        );
    }

    #[test]
    fn domains_are_checked() {
        assert!(validate_domain("example.com").is_ok());
        assert!(validate_domain("a b.com").is_err());
        assert!(validate_domain("x@y").is_err());
        assert!(validate_domain("").is_err());
    }

    #[test]
    fn env_overrides_nest_by_double_underscore() {
        let env = vec![
            ("INVOICE_REMINDER__LOCK__TTL".to_owned(), "2s".to_owned()),
            ("INVOICE_REMINDER__REPLICA_ID".to_owned(), "r1".to_owned()),
            ("INVOICE_REMINDER_CONFIG".to_owned(), "x.toml".to_owned()),
            ("OTHER".to_owned(), "y".to_owned()),
        ];
        let overrides = EnvOverrides::new(&env);
        let lock = overrides.values.get("lock").and_then(|v| v.as_dict());
        assert_eq!(
            lock.and_then(|d| d.get("ttl")).and_then(|v| v.as_str()),
            Some("2s")
        );
        assert_eq!(
            overrides.values.get("replica_id").and_then(|v| v.as_str()),
            Some("r1")
        );
        assert_eq!(overrides.values.len(), 2);
    }

    #[test]
    fn application_name_fits_postgres_limit() {
        let long = "x".repeat(100);
        assert!(application_name(&long).len() <= 63);
        assert_eq!(application_name("a"), "invoice-reminder/a");
    }
}
