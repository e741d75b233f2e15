//! One configuration problem as one line: the key, the reason, and where
//! the value came from (the file, or the environment variable's name).
//!
//! figment reports problems with a key path and the provider that supplied
//! the value; this module turns that into the line `main` prints before it
//! exits 2. Values never appear in it unless a parser put them there, and
//! parsers of secret values redact them first (`urls`).

use std::fmt;
use std::path::Path;

use super::{ENV_PREFIX, ENV_SEPARATOR};

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
    pub(super) fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
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

/// Turns figment's error into one line naming the key and its source.
/// `path` is the user's file, if one was read.
pub(super) fn from_figment(error: figment::Error, path: Option<&Path>) -> ConfigError {
    use figment::error::Kind;
    // `reminders.stages.1.name` reads better as `reminders.stages[1].name`.
    let key = error.path.iter().fold(String::new(), |mut key, part| {
        if part.chars().all(|c| c.is_ascii_digit()) && !key.is_empty() {
            key.push_str(&format!("[{part}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(part);
        }
        key
    });
    let file = path.map_or_else(
        || "the built-in defaults".to_owned(),
        |p| p.display().to_string(),
    );
    let reason = match &error.kind {
        Kind::UnknownField(field, _) => {
            // figment's path already ends with the unknown field.
            let full = if key.is_empty() {
                field.clone()
            } else if error.path.last() == Some(field) {
                // figment's path already ends with the unknown field.
                key.clone()
            } else {
                format!("{key}.{field}")
            };
            return with_source(ConfigError::new(full, "unknown key"), &error, &file);
        }
        Kind::Message(msg) if key.is_empty() => {
            // TOML syntax errors arrive as messages without a key.
            return ConfigError::new("", format!("cannot parse {file}: {}", one_line(msg)));
        }
        other => other.to_string(),
    };
    with_source(ConfigError::new(key, reason), &error, &file)
}

fn with_source(mut err: ConfigError, error: &figment::Error, file: &str) -> ConfigError {
    err.source = match &error.metadata {
        Some(md) if md.name.starts_with("environment") => Some(format!(
            "environment variable {ENV_PREFIX}{}",
            err.key
                .split('.')
                .map(str::to_uppercase)
                .collect::<Vec<_>>()
                .join(ENV_SEPARATOR)
        )),
        Some(md) if md.name.contains("TOML") => Some(file.to_owned()),
        _ => None,
    };
    err
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_messages_become_one_line() {
        let msg = "TOML parse error at line 1, column 6\n  |\n1 | [lock\n  |      ^\ninvalid table header\nexpected `.`, `]`\n";
        assert_eq!(
            one_line(msg),
            "TOML parse error at line 1, column 6: invalid table header; expected `.`, `]`"
        );
    }
}
