//! `[console]`: where the operator console listens, how long a session
//! lasts, and who may sign in. Password hashes are checked to be argon2id
//! PHC strings when the settings load, so a console never starts with a
//! user who could never sign in; that there is at least one user is the
//! console's own check (the worker needs none).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Where `invoice-reminder console` serves.
    pub listen: SocketAddr,
    /// A session ends this long after sign-in.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
    /// The path prefix the console is served under behind a reverse
    /// proxy (`/billing`), or empty; never ends in `/`.
    #[serde(deserialize_with = "base_path")]
    pub base_path: String,
    /// Who may sign in.
    pub users: Vec<ConsoleUser>,
}

impl ConsoleSettings {
    /// The user named `name`, if configured.
    pub fn user(&self, name: &str) -> Option<&ConsoleUser> {
        self.users.iter().find(|u| u.name == name)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleUser {
    pub name: String,
    /// An argon2id PHC string (`invoice-reminder console hash-password`).
    #[serde(deserialize_with = "argon2id_phc")]
    pub password_hash: String,
    pub role: Role,
}

/// What a console user may do: a viewer reads everything, an editor
/// also acts. `"operator"`, the editor's earlier name, still reads as
/// one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    #[serde(alias = "operator")]
    Editor,
}

fn argon2id_phc<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let parsed = argon2::PasswordHash::new(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "not a PHC string ({e}); make one with `invoice-reminder console hash-password`"
        ))
    })?;
    if parsed.algorithm.as_str() != "argon2id" {
        return Err(serde::de::Error::custom(format!(
            "the hash uses {}, not argon2id",
            parsed.algorithm
        )));
    }
    Ok(text)
}

fn base_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let trimmed = text.trim_end_matches('/');
    let plain = trimmed
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-_.~".contains(c));
    if !trimmed.is_empty() && (!trimmed.starts_with('/') || !plain || trimmed.contains("//")) {
        return Err(serde::de::Error::custom(format!(
            "{text:?} is not a path prefix such as \"/billing\""
        )));
    }
    Ok(trimmed.to_owned())
}
