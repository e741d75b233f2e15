//! URLs that hold secrets: `database.url` and `redis.url`, checked once
//! at load, and [`redact_url`], the only way such a URL reaches a message.
//!
//! Guarantee: no password (in the user info or in a query parameter such
//! as `?password=`) is ever printed, even for a URL that does not parse.

use std::fmt;
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use sqlx::postgres::PgConnectOptions;

use super::types::string_like;

/// A PostgreSQL URL, checked and turned into connect options once. The
/// URL is a secret (it may hold a password).
#[derive(Clone)]
pub struct DatabaseUrl {
    url: SecretString,
    options: PgConnectOptions,
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(self.url.expose_secret()))
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(self.0.expose_secret()))
    }
}

impl DatabaseUrl {
    pub fn options(&self) -> &PgConnectOptions {
        &self.options
    }
}

impl ExposeSecret<str> for DatabaseUrl {
    fn expose_secret(&self) -> &str {
        self.url.expose_secret()
    }
}

impl<'de> Deserialize<'de> for DatabaseUrl {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let url = string_like(de)?;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(D::Error::custom(format!(
                "not a PostgreSQL URL ({}): it must start with postgres:// or postgresql://",
                redact_url(&url)
            )));
        }
        let options = PgConnectOptions::from_str(&url).map_err(|e| {
            D::Error::custom(format!(
                "not a valid PostgreSQL URL ({}): {}",
                redact_url(&url),
                scrub(&e.to_string(), &url)
            ))
        })?;
        Ok(Self {
            url: SecretString::from(url),
            options,
        })
    }
}

/// A Redis URL, checked once. A secret, like [`DatabaseUrl`].
#[derive(Clone)]
pub struct RedisUrl(SecretString);

impl ExposeSecret<str> for RedisUrl {
    fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl<'de> Deserialize<'de> for RedisUrl {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let url = string_like(de)?;
        if let Err(e) = redis::Client::open(url.as_str()) {
            return Err(D::Error::custom(format!(
                "not a valid Redis URL ({}): {}",
                redact_url(&url),
                scrub(&e.to_string(), &url)
            )));
        }
        Ok(Self(SecretString::from(url)))
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

/// Removes the URL (which may hold a password) from a parser's message.
fn scrub(message: &str, url: &str) -> String {
    if url.is_empty() {
        message.to_owned()
    } else {
        message.replace(url, &redact_url(url))
    }
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
}
