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
use url::Url;

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
        let invalid = |reason: String| {
            D::Error::custom(format!(
                "not a valid PostgreSQL URL ({}): {reason}",
                redact_url(&url)
            ))
        };
        parse_unambiguous(&url).map_err(|refusal| invalid(refusal.to_string()))?;
        let options =
            PgConnectOptions::from_str(&url).map_err(|e| invalid(scrub(&e.to_string(), &url)))?;
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
        let invalid = |reason: String| {
            D::Error::custom(format!(
                "not a valid Redis URL ({}): {reason}",
                redact_url(&url)
            ))
        };
        parse_unambiguous(&url).map_err(|refusal| invalid(refusal.to_string()))?;
        if let Err(e) = redis::Client::open(url.as_str()) {
            return Err(invalid(scrub(&e.to_string(), &url)));
        }
        Ok(Self(SecretString::from(url)))
    }
}

/// Why a URL is not read the way it is written (see [`parse_unambiguous`]).
/// The messages hold nothing of the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    #[error("{0}{PERCENT_ENCODE}")]
    Unparsable(url::ParseError),
    #[error("it has a '#' part, which no PostgreSQL or Redis URL has{PERCENT_ENCODE}")]
    Fragment,
    #[error("an '@' follows the host{PERCENT_ENCODE}")]
    AtAfterHost,
}

/// The hint every [`Refusal`] ends with.
const PERCENT_ENCODE: &str = "; if the password holds '/', '?', '#' or '@', percent-encode them (%2F, %3F, %23, %40), as in any URL";

/// The URL as the `url` crate (which sqlx and redis use) parses it, when
/// that is how a person reads it. A password with an unencoded '/', '?' or
/// '#' parses "successfully" into a wrong host, path, query or fragment
/// (`postgres://app:p@ss?w#rd@db/x`: host `ss`, query `w`, fragment
/// `rd@db/x`), so a URL is refused when it has a fragment (sqlx reads
/// none; redis only `rediss://...#insecure`, and this build has no TLS for
/// Redis) or an '@' after the host (in the path or query: where the real
/// host would follow).
fn parse_unambiguous(text: &str) -> Result<Url, Refusal> {
    let url = Url::parse(text).map_err(Refusal::Unparsable)?;
    if url.fragment().is_some() {
        return Err(Refusal::Fragment);
    }
    if url.path().contains('@') || url.query().is_some_and(|q| q.contains('@')) {
        return Err(Refusal::AtAfterHost);
    }
    Ok(url)
}

/// Query parameters whose value is a secret: `password` (sqlx), `pass`
/// (redis over a Unix socket), and anything that looks like a credential.
fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "secret", "token", "auth", "credential"]
        .iter()
        .any(|word| name.contains(word))
}

/// The URL with its password and every secret query parameter replaced by
/// `***`. A URL that does not parse unambiguously (see
/// [`parse_unambiguous`]) is shown as its scheme alone (`postgres://***`):
/// any part of it might be a password.
pub fn redact_url(text: &str) -> String {
    parse_unambiguous(text)
        .ok()
        .and_then(redact_parsed)
        .unwrap_or_else(|| redact_unparsed(text))
}

fn redact_parsed(mut url: Url) -> Option<String> {
    if url.password().is_some() {
        url.set_password(Some("***")).ok()?;
    }
    if url
        .query_pairs()
        .any(|(name, _)| is_secret_parameter(&name))
    {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = match is_secret_parameter(&name) {
                    true => "***".to_owned(),
                    false => value.into_owned(),
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    Some(url.into())
}

fn redact_unparsed(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            format!("{scheme}://***")
        }
        _ => "***".to_owned(),
    }
}

/// Removes the URL, and every secret in it (as written and decoded), from
/// a library's message.
fn scrub(message: &str, text: &str) -> String {
    let mut secrets = vec![text.to_owned()];
    if let Ok(url) = Url::parse(text) {
        if let Some(password) = url.password() {
            secrets.push(password.to_owned());
            if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
                secrets.push(decoded.into_owned());
            }
        }
        secrets.extend(
            url.query_pairs()
                .filter(|(name, _)| is_secret_parameter(name))
                .map(|(_, value)| value.into_owned()),
        );
    }
    secrets.retain(|s| !s.is_empty());
    // The longest first, so a secret inside another is not left half-shown.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.iter().fold(message.to_owned(), |message, secret| {
        message.replace(secret.as_str(), "***")
    })
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

    /// `redact_url(url)` shows none of `secrets`.
    fn hides(url: &str, secrets: &[&str]) -> String {
        let shown = redact_url(url);
        for secret in secrets {
            assert!(
                !shown.contains(secret),
                "{url:?} was shown as {shown:?}, which holds {secret:?}"
            );
        }
        shown
    }

    #[test]
    fn a_password_in_the_query_is_hidden_and_the_rest_kept() {
        let shown = hides(
            "postgres://app@db:5432/x?sslmode=disable&password=s3cret",
            &["s3cret"],
        );
        assert!(shown.contains("sslmode=disable"), "{shown}");
        assert!(shown.contains("db:5432/x"), "{shown}");
        hides("redis+unix:///run/redis.sock?pass=s3cret&db=1", &["s3cret"]);
        hides("postgres://db/x?PassWord=s3cret", &["s3cret"]);
        hides("postgres://db/x?sslpassword=s3cret", &["s3cret"]);
    }

    #[test]
    fn a_percent_encoded_password_is_hidden_in_both_forms() {
        let shown = hides(
            "postgres://app:p%40ss%3Fw%23rd%2F1@db:5432/x",
            &["p%40ss", "p@ss", "rd%2F1", "rd/1"],
        );
        assert_eq!(shown, "postgres://app:***@db:5432/x");
    }

    #[test]
    fn an_unencoded_special_character_in_a_password_shows_none_of_it() {
        let pieces = ["p@ss", "ss?w", "w#rd", "rd/1", "ss", "rd"];
        hides("postgres://app:p@ss?w#rd/1@127.0.0.1:5432/x", &pieces);
        hides("redis://:p@ss?w#rd/1@127.0.0.1:6379/0", &pieces);
        hides("postgres://app:pa#ss@db/x", &["pa#ss", "ss"]);
        hides("postgres://app:pa?ss@db/x", &["pa?ss", "ss"]);
        hides("postgres://app:pa/ss@db/x", &["pa/ss", "ss"]);
        hides("postgres://app:12/ss@db/x", &["12/ss", "ss"]);
        hides("postgres://app:12?ss@db/x", &["12?ss", "ss"]);
        hides("postgres://app@db/x?password=p@ss?w#rd/1", &pieces);
        hides("postgres://db/x?password=se@cret", &["se@cret", "cret"]);
        hides("app:s3cret@db:5432/x", &["s3cret"]);
        hides("postgres://app:s3 cret@db:5432/x", &["s3 cret", "cret"]);
    }

    /// `database.url` as the settings loader parses it.
    fn database_url(url: &str) -> Result<DatabaseUrl, String> {
        DatabaseUrl::deserialize(
            serde::de::value::StrDeserializer::<serde::de::value::Error>::new(url),
        )
        .map_err(|e| e.to_string())
    }

    fn redis_url(url: &str) -> Result<RedisUrl, String> {
        RedisUrl::deserialize(
            serde::de::value::StrDeserializer::<serde::de::value::Error>::new(url),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_url_whose_password_needs_percent_encoding_is_refused_without_showing_it() {
        for url in [
            "postgres://app:p@ss?w#rd/1@127.0.0.1:5432/x",
            "postgres://app:12/zq@db/x",
            "postgres://app:pa#zq@db/x",
            "postgres://app@db/x?password=pa#zq",
        ] {
            let error = database_url(url)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(error.contains("percent-encode"), "{url}: {error}");
            for piece in ["zq", "p@ss", "ss?w", "rd/1"] {
                assert!(!error.contains(piece), "{url}: {error}");
            }
        }
        let error = redis_url("redis://:p@ss?w#rd/1@127.0.0.1:6379/0").expect_err("refused");
        assert!(error.contains("percent-encode"), "{error}");
        assert!(
            !error.contains("ss?w") && !error.contains("rd/1"),
            "{error}"
        );
    }

    #[test]
    fn well_formed_urls_with_passwords_load_and_debug_shows_no_password() {
        let db = database_url("postgres://app:p%40ss%3Fw%23rd%2F1@db:5432/x?sslmode=disable")
            .expect("loads");
        assert_eq!(db.options().get_host(), "db");
        assert_eq!(db.options().get_database(), Some("x"));
        let shown = format!("{db:?}");
        assert!(
            !shown.contains("p%40ss") && !shown.contains("p@ss"),
            "{shown}"
        );
        let db = database_url("postgres://app@db/x?password=s3cret").expect("loads");
        assert!(!format!("{db:?}").contains("s3cret"));
        let redis = redis_url("redis://:s3cret@127.0.0.1:6379/0").expect("loads");
        assert!(!format!("{redis:?}").contains("s3cret"));
    }
}
