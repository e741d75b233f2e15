//! `INVOICE_REMINDER__<SECTION>__<KEY>` overrides, read from an explicit
//! list of variables so tests can load settings exactly as a container's
//! environment gives them. Variables without the prefix are ignored; a
//! misspelled key after the prefix is an unknown key like one in a file.

use std::str::FromStr;

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::{ENV_PREFIX, ENV_SEPARATOR};

/// The overrides as a figment provider, nested by `__`.
pub(super) struct EnvOverrides {
    values: Dict,
}

impl EnvOverrides {
    pub(super) fn new(env: &[(String, String)]) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
