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

mod calendars;
mod console;
mod env;
mod error;
mod ics;
mod late_payment;
mod names;
mod payments;
mod sections;
mod send_window;
mod types;
mod urls;
mod validate;

use std::path::PathBuf;

use figment::Figment;
use figment::providers::{Format, Toml};
use serde::Deserialize;

pub use calendars::Calendars;
pub use console::{ConsoleSettings, ConsoleUser, Role};
pub use error::ConfigError;
pub use late_payment::{CustomSection, LatePaymentSettings};
pub use names::{RelationName, SqlName};
pub use payments::PaymentSettings;
pub use sections::*;
pub use send_window::SendWindowSettings;
pub use types::{Cron, parse_cron};
pub use urls::{DatabaseUrl, RedisUrl, redact_url};

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
    pub send_window: SendWindowSettings,
    pub lock: LockSettings,
    pub reminders: ReminderSettings,
    pub templates: TemplateSettings,
    pub company: CompanySettings,
    pub http: HttpSettings,
    pub payments: PaymentSettings,
    pub late_payment: LatePaymentSettings,
    pub smtp: SmtpSettings,
    pub archive: ArchiveSettings,
    pub log: LogSettings,
    pub shutdown: ShutdownSettings,
    pub console: ConsoleSettings,
}

impl Settings {
    /// The send window, in its zone (`send_window.timezone`, else
    /// `schedule.timezone`).
    pub fn send_window(&self) -> crate::domain::SendWindow {
        self.send_window.window(self.schedule.timezone)
    }

    /// The zone of the customers' day: "today", the due steps and the
    /// gap are counted in it (the send window's zone).
    pub fn customer_timezone(&self) -> chrono_tz::Tz {
        self.send_window().timezone
    }

    /// These settings as a customer sees them: the send window (and with it
    /// the customer's "today") in their own zone, and their holiday
    /// calendar closing its days and counting business days. None when
    /// the customer names neither (or only a calendar no one knows: that
    /// customer goes by the window's days and hours alone).
    pub fn for_customer(&self, customer: &crate::domain::Customer) -> Option<Self> {
        let calendar = customer.holiday_calendar.as_deref().map(str::trim);
        if customer.timezone.is_none() && calendar.is_none_or(str::is_empty) {
            return None;
        }
        let window = self.send_window.window_of(self.schedule.timezone, customer);
        let mut mine = self.clone();
        mine.send_window.timezone = Some(window.timezone);
        mine.send_window.holidays = window.open.holidays().cloned().map(std::sync::Arc::new);
        let open = window.open;
        mine.reminders.stages = mine.reminders.stages.clone().counting(open);
        Some(mine)
    }

    /// Loads and validates; the first problem found is returned.
    pub fn load(source: &ConfigSource) -> Result<Self, ConfigError> {
        let file = source.file()?;
        let mut figment = Figment::from(Toml::string(DEFAULTS));
        if let Some(path) = &file {
            figment = figment.merge(Toml::file_exact(path));
        }
        let mut settings: Settings = figment
            .merge(env::EnvOverrides::new(&source.env))
            .extract()
            .map_err(|e| error::from_figment(e, file.as_deref()))?;
        settings.late_payment.read_rates()?;
        settings.send_window.read_calendars()?;
        // Business-day stages count the send window's open days.
        let open = settings.send_window().open;
        settings.reminders.stages = settings.reminders.stages.clone().counting(open);
        validate::check(&settings)?;
        Ok(settings)
    }
}

#[cfg(test)]
impl Settings {
    /// The defaults under `INVOICE_REMINDER__{KEY}` = value for each pair,
    /// for unit tests.
    pub(crate) fn load_with(env: &[(&str, &str)]) -> Result<Self, ConfigError> {
        Self::load(&ConfigSource {
            path: None,
            env: env
                .iter()
                .map(|(k, v)| (format!("INVOICE_REMINDER__{k}"), (*v).to_owned()))
                .collect(),
        })
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
    fn webhook_secrets_in_the_wrong_form_name_their_key_and_are_never_shown() {
        for (key, bad) in [
            ("WEBHOOK_SECRET", "s3cret-value"),
            ("WEBHOOK_SECRET", "whsec_!!not-base64!!"),
            ("WEBHOOK_BASIC_AUTH", "no-colon-here"),
        ] {
            let loaded = Settings::load(&ConfigSource {
                path: None,
                env: vec![(format!("INVOICE_REMINDER__HTTP__{key}"), bad.into())],
            });
            let e = loaded.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(&format!("http.{}", key.to_lowercase())), "{e}");
            assert!(!e.contains(bad), "{e}");
        }
        let good = load(&[
            (
                "HTTP__WEBHOOK_SECRET",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            ),
            ("HTTP__LISTEN", "127.0.0.1:9464"),
        ]);
        assert!(good.is_ok_and(|s| s.http.webhook_enabled()));
    }

    fn load(env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::load_with(env)
    }

    #[test]
    fn a_key_that_only_works_with_another_is_refused_alone_naming_it() {
        const SECRET: (&str, &str) = (
            "HTTP__WEBHOOK_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        );
        const LISTEN: (&str, &str) = ("HTTP__LISTEN", "127.0.0.1:9464");
        const SECRET_PAYMENTS: (&str, &str) =
            ("PAYMENTS__SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        for (env, key, reason) in [
            (
                vec![("HTTP__WEBHOOK_BASIC_AUTH", "pm:pw"), LISTEN],
                "http.webhook_basic_auth",
                "needs http.webhook_secret",
            ),
            (
                vec![("HTTP__WEBHOOK_LISTEN", "0.0.0.0:8080")],
                "http.webhook_listen",
                "needs http.webhook_secret",
            ),
            (
                vec![SECRET],
                "http.webhook_secret",
                "needs http.listen or http.webhook_listen",
            ),
            (
                vec![SECRET, LISTEN, ("HTTP__WEBHOOK_LISTEN", "127.0.0.1:9464")],
                "http.webhook_listen",
                "must differ",
            ),
            (
                vec![("SMTP__CA_FILE", "/etc/hostname")],
                "smtp.ca_file",
                "only used with smtp.tls",
            ),
            (
                vec![("HTTP__MAX_CONNECTIONS", "0")],
                "http.max_connections",
                "between 1 and",
            ),
            (
                vec![("HTTP__MAX_HEADER_BYTES", "100")],
                "http.max_header_bytes",
                "between 1024 and",
            ),
            (
                vec![("HTTP__BODY_READ_TIMEOUT", "0s")],
                "http.body_read_timeout",
                "greater than zero",
            ),
            (
                vec![("REMINDERS__RETRY_BACKOFF_MAX", "3651days")],
                "reminders.retry_backoff_max",
                "at most 3650 days",
            ),
            (
                vec![SECRET_PAYMENTS],
                "payments.secret",
                "needs http.listen or http.webhook_listen",
            ),
            (
                vec![LISTEN, ("PAYMENTS__SECRET", "whsec_not base64!")],
                "payments.secret",
                "whsec_ followed by the base64 key",
            ),
            (
                vec![LISTEN, ("PAYMENTS__STRIPE_SECRETS", "[\"sk_live_123\"]")],
                "payments.stripe_secrets",
                "whsec_",
            ),
            (
                vec![LISTEN, SECRET_PAYMENTS, ("PAYMENTS__PENDING_HOLD", "0s")],
                "payments.pending_hold",
                "greater than zero",
            ),
            (
                vec![LISTEN, SECRET_PAYMENTS, ("PAYMENTS__TOLERANCE", "2days")],
                "payments.tolerance",
                "at most 24 hours",
            ),
            (
                vec![
                    LISTEN,
                    SECRET_PAYMENTS,
                    ("PAYMENTS__STRIPE_INVOICE_KEY", "metadata..id"),
                ],
                "payments.stripe_invoice_key",
                "dotted path",
            ),
        ] {
            let e = load(&env).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(key) && e.contains(reason), "{env:?}: {e}");
        }
        for env in [
            vec![SECRET, ("HTTP__WEBHOOK_LISTEN", "0.0.0.0:8080")],
            vec![SECRET, LISTEN, ("HTTP__WEBHOOK_BASIC_AUTH", "pm:pw")],
            vec![SECRET, LISTEN, ("HTTP__WEBHOOK_LISTEN", "0.0.0.0:8080")],
        ] {
            let loaded = load(&env);
            assert!(loaded.is_ok(), "{env:?}: {:?}", loaded.err());
        }
    }
}
