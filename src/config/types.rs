//! Values that are parsed while the settings are deserialized: a cron
//! expression, a time zone, an address, a domain (URLs that hold secrets
//! are in `urls`).
//!
//! Each parser reports one line naming what is wrong, in our words (the
//! libraries' own messages are vaguer).

use std::fmt;
use std::str::FromStr;

use chrono_tz::Tz;
use lettre::message::Mailbox;
use secrecy::SecretString;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// Accepts a string, or a number/bool that an environment variable was
/// parsed into (`INVOICE_REMINDER__SMTP__PASSWORD=12345`), as a string.
pub(super) fn string_like<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
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

pub(super) fn optional_string<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<String>, D::Error> {
    string_like(de).map(|s| Some(s).filter(|s| !s.trim().is_empty()))
}

pub(super) fn optional_secret<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<SecretString>, D::Error> {
    optional_string(de).map(|s| s.map(SecretString::from))
}

/// A blank or missing `replica_id` becomes [`default_replica_id`].
pub(super) fn replica_id<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    Ok(optional_string(de)?.unwrap_or_else(default_replica_id))
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

/// The stage list; its rules are checked in `validate`.
pub(super) fn stages<'de, D: Deserializer<'de>>(de: D) -> Result<crate::stages::Stages, D::Error> {
    Vec::<crate::stages::Stage>::deserialize(de).map(crate::stages::Stages::new)
}

pub(super) fn optional_path<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<std::path::PathBuf>, D::Error> {
    optional_string(de).map(|s| s.map(std::path::PathBuf::from))
}

pub(super) fn optional_mailbox<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<Mailbox>, D::Error> {
    match optional_string(de)? {
        None => Ok(None),
        Some(text) => text
            .parse()
            .map(Some)
            .map_err(|e| D::Error::custom(format!("not a valid address {text:?}: {e}"))),
    }
}

/// Empty: None; otherwise `IP:port`.
pub(super) fn optional_socket_addr<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<std::net::SocketAddr>, D::Error> {
    match optional_string(de)? {
        None => Ok(None),
        Some(text) => text.trim().parse().map(Some).map_err(|_| {
            D::Error::custom(format!(
                "not an address {text:?} (an IP and a port, e.g. \"0.0.0.0:9464\", or \"\" for off)"
            ))
        }),
    }
}

impl<'de> Deserialize<'de> for super::MaxTickDuration {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let text = string_like(de)?;
        if text.trim() == "auto" {
            return Ok(Self::Auto);
        }
        match humantime::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() => Ok(Self::Fixed(d)),
            _ => Err(D::Error::custom(format!(
                "{text:?} is neither \"auto\" nor a positive duration such as \"10m\""
            ))),
        }
    }
}

/// Empty: None; otherwise a duration.
pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    match optional_string(de)? {
        None => Ok(None),
        Some(text) => humantime::parse_duration(text.trim())
            .map(Some)
            .map_err(|e| {
                D::Error::custom(format!(
                    "not a duration {text:?}: {e} (e.g. \"30m\", or \"\" for off)"
                ))
            }),
    }
}

/// `0` means "no limit".
/// A count that must be at least 1, as the size a program holds it in.
pub(super) fn at_least_one<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<std::num::NonZeroUsize, D::Error> {
    let n = u64::deserialize(de)?;
    usize::try_from(n)
        .ok()
        .and_then(std::num::NonZeroUsize::new)
        .ok_or_else(|| D::Error::custom("must be at least 1"))
}

pub(super) fn zero_is_none<'de, D: Deserializer<'de>>(de: D) -> Result<Option<u32>, D::Error> {
    u32::deserialize(de).map(|n| Some(n).filter(|n| *n > 0))
}

pub(super) fn timezone<'de, D: Deserializer<'de>>(de: D) -> Result<Tz, D::Error> {
    let name = string_like(de)?;
    name.parse().map_err(|_| {
        D::Error::custom(format!(
            "unknown time zone {name:?} (use an IANA name such as \"UTC\" or \"Europe/Madrid\")"
        ))
    })
}

pub(super) fn mailbox<'de, D: Deserializer<'de>>(de: D) -> Result<Mailbox, D::Error> {
    let text = string_like(de)?;
    text.parse()
        .map_err(|e| D::Error::custom(format!("not a valid address {text:?}: {e}")))
}

/// A DNS name: letters, digits, `-` and `.`, as in a Message-ID's right side.
pub(super) fn domain<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    let domain = string_like(de)?;
    let ok = !domain.is_empty()
        && domain.len() <= 253
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(domain)
    } else {
        Err(D::Error::custom(format!(
            "not a valid domain {domain:?} (letters, digits, '-' and '.' only)"
        )))
    }
}

/// A cron expression with six fields, seconds first, parsed exactly as
/// tokio-cron-scheduler parses it (day-of-month AND day-of-week).
#[derive(Clone)]
pub struct Cron {
    expr: String,
    parsed: croner::Cron,
}

impl Cron {
    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.expr
    }

    pub fn parsed(&self) -> &croner::Cron {
        &self.parsed
    }
}

impl FromStr for Cron {
    type Err = String;
    fn from_str(expr: &str) -> Result<Self, String> {
        Ok(Self {
            expr: expr.to_owned(),
            parsed: parse_cron(expr)?,
        })
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expr)
    }
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.expr)
    }
}

impl<'de> Deserialize<'de> for Cron {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        string_like(de)?.parse().map_err(D::Error::custom)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_needs_six_fields_with_seconds_first() {
        assert!(parse_cron("*/2 * * * * *").is_ok());
        assert!(parse_cron("*/5 * * * *").is_err());
        assert!(parse_cron("not cron").is_err());
    }

    #[test]
    fn domains_are_checked() {
        let check =
            |d: &str| domain(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(d));
        assert!(check("example.com").is_ok());
        assert!(check("a b.com").is_err());
        assert!(check("x@y").is_err());
        assert!(check("").is_err());
    }
}
