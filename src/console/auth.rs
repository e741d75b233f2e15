//! Who is signing in: argon2id password hashes (OWASP's parameters, the
//! argon2 crate's defaults: 19 MiB, 2 passes, 1 lane), checked in the
//! same time whether or not the user exists, and a throttle on failed
//! sign-ins per user name and per client address.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier as _, SaltString};

use crate::config::{ConsoleSettings, ConsoleUser};

/// Failed sign-ins allowed per user name, and per address, within
/// [`WINDOW`]; beyond it every attempt is refused until the oldest ages out.
pub const MAX_FAILURES: usize = 5;
/// How long a failed sign-in counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);

/// The argon2id PHC string of `password`, with a random salt.
pub fn hash(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// A hash no password matches, checked when the user does not exist so
/// that a wrong name takes as long as a wrong password.
const DECOY: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$Jw1Eu1C6GlXQZD4X3yN0Fg6k2Qb3p5xk4mKqH6q0m5Y";

/// The user `name` if `password` is theirs.
pub fn verify<'a>(
    console: &'a ConsoleSettings,
    name: &str,
    password: &str,
) -> Option<&'a ConsoleUser> {
    let user = console.user(name);
    let phc = user.map_or(DECOY, |u| u.password_hash.as_str());
    let matches = PasswordHash::new(phc).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    });
    user.filter(|_| matches)
}

/// Recent failed sign-ins by user name and by address, in this process.
#[derive(Debug, Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, Vec<Instant>>>,
}

impl Throttle {
    fn keys(name: &str, address: Option<IpAddr>) -> Vec<String> {
        let mut keys = vec![format!("user:{name}")];
        if let Some(a) = address {
            keys.push(format!("addr:{a}"));
        }
        keys
    }

    /// Whether a sign-in as `name` from `address` may be tried now.
    pub fn allows(&self, name: &str, address: Option<IpAddr>, now: Instant) -> bool {
        let Ok(mut failures) = self.failures.lock() else {
            return false;
        };
        Self::keys(name, address).iter().all(|key| {
            let recent = failures.entry(key.clone()).or_default();
            recent.retain(|at| now.saturating_duration_since(*at) < WINDOW);
            recent.len() < MAX_FAILURES
        })
    }

    /// Counts a failed sign-in.
    pub fn failed(&self, name: &str, address: Option<IpAddr>, now: Instant) {
        if let Ok(mut failures) = self.failures.lock() {
            for key in Self::keys(name, address) {
                failures.entry(key).or_default().push(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_name_is_refused_after_five_failures_until_they_age_out() {
        let throttle = Throttle::default();
        let t0 = Instant::now();
        let ip: Option<IpAddr> = "10.0.0.1".parse().ok();
        for n in 0..MAX_FAILURES {
            assert!(throttle.allows("alice", ip, t0), "attempt {n}");
            throttle.failed("alice", ip, t0);
        }
        assert!(
            !throttle.allows("alice", "10.0.0.2".parse().ok(), t0),
            "by name"
        );
        assert!(!throttle.allows("bob", ip, t0), "by address");
        assert!(throttle.allows("bob", "10.0.0.2".parse().ok(), t0));
        assert!(throttle.allows("alice", ip, t0 + WINDOW));
    }

    #[test]
    fn a_hash_verifies_its_password_only() {
        let phc = hash("correct horse").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        let console = ConsoleSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            session_ttl: Duration::from_secs(60),
            base_path: String::new(),
            users: vec![ConsoleUser {
                name: "alice".into(),
                password_hash: phc,
                role: crate::config::Role::Editor,
            }],
        };
        assert!(verify(&console, "alice", "correct horse").is_some());
        assert!(verify(&console, "alice", "wrong").is_none());
        assert!(verify(&console, "bob", "correct horse").is_none());
        assert!(
            PasswordHash::new(DECOY).is_ok(),
            "the decoy is checked like a real hash"
        );
    }
}
