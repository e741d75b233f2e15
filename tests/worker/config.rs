//! Configuration through the real binary: every error is one line naming
//! the key, exit code 2, before anything connects; secrets never printed.

use std::io::Write;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use invoice_reminder::config::{ConfigSource, Settings};

use crate::common;

fn binary() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_invoice-reminder"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // Unreachable services: a config error must be reported before any
        // connection is attempted (and quickly).
        .env(
            "INVOICE_REMINDER__DATABASE__URL",
            "postgres://app:hunter2@127.0.0.1:9/x",
        )
        .env("INVOICE_REMINDER__DATABASE__CONNECT_TIMEOUT", "30s");
    cmd
}

fn write_config(contents: &str) -> tempfile_path::TempConfig {
    tempfile_path::TempConfig::new(contents)
}

mod tempfile_path {
    use super::*;

    /// A config file under the target dir, removed on drop.
    pub struct TempConfig {
        pub path: std::path::PathBuf,
    }

    impl TempConfig {
        pub fn new(contents: &str) -> Self {
            let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            let path = dir.join(format!("config-{}.toml", uuid::Uuid::new_v4().simple()));
            let mut file = std::fs::File::create(&path).expect("create temp config");
            file.write_all(contents.as_bytes())
                .expect("write temp config");
            Self { path }
        }
    }

    impl Drop for TempConfig {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Runs `invoice-reminder --config <default + extra> status` with `env`.
fn run_with(extra_toml: &str, env: &[(&str, &str)]) -> (Output, Duration) {
    let base = std::fs::read_to_string(common::default_config_path()).unwrap();
    let file = write_config(&merge(&base, extra_toml));
    let mut cmd = binary();
    cmd.arg("--config").arg(&file.path).arg("status");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let out = cmd.output().expect("run binary");
    (out, started.elapsed())
}

/// Appends `extra` keys into their sections of `base` (replacing same keys).
fn merge(base: &str, extra: &str) -> String {
    let mut doc: toml::Table = base.parse().unwrap();
    let extra: toml::Table = extra.parse().unwrap();
    for (k, v) in extra {
        match (doc.get_mut(&k), v) {
            (Some(toml::Value::Table(section)), toml::Value::Table(more)) => section.extend(more),
            (_, v) => {
                doc.insert(k, v);
            }
        }
    }
    toml::to_string(&doc).unwrap()
}

fn assert_config_error(out: &Output, elapsed: Duration, key: &str, reason_part: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let line = stderr.trim();
    assert_eq!(line.lines().count(), 1, "one line expected: {line}");
    assert!(line.contains(key), "should name {key}: {line}");
    assert!(
        line.contains(reason_part),
        "should say {reason_part:?}: {line}"
    );
    assert!(!line.contains("hunter2"), "password leaked: {line}");
    assert!(!line.contains("panicked"), "{line}");
    assert!(
        elapsed < Duration::from_secs(5),
        "took {elapsed:?}: did it try to connect?"
    );
}

#[test]
fn an_unknown_key_is_named() {
    let (out, t) = run_with("[lock]\nttll = \"2s\"\n", &[]);
    assert_config_error(&out, t, "lock.ttll", "unknown key");
}

#[test]
fn a_bad_cron_is_named() {
    let (out, t) = run_with("[schedule]\ncron = \"*/5 * * * *\"\n", &[]);
    assert_config_error(&out, t, "schedule.cron", "cron");
}

#[test]
fn an_unknown_timezone_is_named() {
    let (out, t) = run_with("[schedule]\ntimezone = \"Mars/Olympus\"\n", &[]);
    assert_config_error(&out, t, "schedule.timezone", "unknown time zone");
}

#[test]
fn renew_every_not_shorter_than_ttl_is_refused() {
    let (out, t) = run_with("[lock]\nttl = \"5s\"\nrenew_every = \"5s\"\n", &[]);
    assert_config_error(&out, t, "lock.renew_every", "shorter than lock.ttl");
}

#[test]
fn an_invalid_from_address_is_named() {
    let (out, t) = run_with("[smtp]\nfrom = \"billing at example\"\n", &[]);
    assert_config_error(&out, t, "smtp.from", "not a valid address");
}

#[test]
fn a_bad_duration_is_named() {
    let (out, t) = run_with("[lock]\nttl = \"soon\"\n", &[]);
    assert_config_error(&out, t, "lock.ttl", "");
}

#[test]
fn a_bad_enum_value_is_named() {
    let (out, t) = run_with("[lock]\nbackend = \"etcd\"\n", &[]);
    assert_config_error(&out, t, "lock.backend", "etcd");
}

#[test]
fn an_env_override_error_names_the_variable() {
    let (out, t) = run_with("", &[("INVOICE_REMINDER__LOCK__TTL", "abc")]);
    assert_config_error(&out, t, "lock.ttl", "INVOICE_REMINDER__LOCK__TTL");
}

#[test]
fn an_unknown_env_key_is_refused() {
    let (out, t) = run_with("", &[("INVOICE_REMINDER__LOCK__TTLL", "2s")]);
    assert_config_error(&out, t, "lock.ttll", "unknown key");
}

#[test]
fn a_malformed_file_is_reported() {
    let file = write_config("[lock\nttl = ");
    let started = Instant::now();
    let out = binary()
        .arg("--config")
        .arg(&file.path)
        .arg("status")
        .output()
        .unwrap();
    assert_config_error(&out, started.elapsed(), "cannot parse", "");
}

#[test]
fn a_missing_file_is_reported() {
    let started = Instant::now();
    let out = binary()
        .args(["--config", "/nonexistent/x.toml", "status"])
        .output()
        .unwrap();
    assert_config_error(&out, started.elapsed(), "/nonexistent/x.toml", "not found");
}

#[test]
fn a_bad_database_url_does_not_print_its_password() {
    let (out, t) = run_with(
        "",
        &[(
            "INVOICE_REMINDER__DATABASE__URL",
            "mysql://app:hunter2@db/x",
        )],
    );
    assert_config_error(&out, t, "database.url", "***");
}

#[test]
fn a_url_whose_password_is_not_percent_encoded_is_refused_without_showing_any_of_it() {
    // Read as written, the "host" would be `Pw2Qx`, the query `Pw3Qx` and
    // the rest a fragment: refused, with nothing of the password shown.
    for (key, var, url) in [
        (
            "database.url",
            "INVOICE_REMINDER__DATABASE__URL",
            "postgres://app:Pw1Qx@Pw2Qx?Pw3Qx#Pw4Qx/Pw5Qx@127.0.0.1:9/x",
        ),
        (
            "database.url",
            "INVOICE_REMINDER__DATABASE__URL",
            "postgres://app@127.0.0.1:9/x?password=Pw1Qx#Pw4Qx",
        ),
        (
            "redis.url",
            "INVOICE_REMINDER__REDIS__URL",
            "redis://:Pw1Qx@Pw2Qx?Pw3Qx#Pw4Qx/Pw5Qx@127.0.0.1:9",
        ),
    ] {
        let (out, t) = run_with("", &[(var, url)]);
        assert_config_error(&out, t, key, "percent-encode");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for piece in ["Pw1Qx", "Pw2Qx", "Pw3Qx", "Pw4Qx", "Pw5Qx"] {
            assert!(!stderr.contains(piece), "{url}: {stderr}");
        }
    }
}

#[test]
fn an_unreachable_database_is_a_runtime_error_without_the_password() {
    let base = std::fs::read_to_string(common::default_config_path()).unwrap();
    let file = write_config(&base);
    let out = binary()
        .env("INVOICE_REMINDER__DATABASE__CONNECT_TIMEOUT", "2s")
        .arg("--config")
        .arg(&file.path)
        .arg("audit")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("failed to connect to PostgreSQL"),
        "{stderr}"
    );
    assert!(stderr.contains("app:***@127.0.0.1:9"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Every leaf key of a TOML document with its value, dotted.
fn toml_leaves(text: &str) -> BTreeMap<String, toml::Value> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => walk(&key, inner, out),
                other => {
                    out.insert(key, other.clone());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", &text.parse().unwrap(), &mut out);
    out
}

/// The configuration table in docs/configuration.md: key -> default, as
/// written there.
fn documented_key_table() -> BTreeMap<String, String> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    let backticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut table = BTreeMap::new();
    let rows = readme
        .lines()
        .skip_while(|l| !l.starts_with("| key | default | meaning |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let keys = backticked(cells[1]);
        let mut defaults = backticked(cells[2]);
        if defaults.is_empty() {
            defaults.push(cells[2].to_owned());
        }
        if defaults.len() == 1 {
            defaults = vec![defaults[0].clone(); keys.len()];
        }
        assert_eq!(
            keys.len(),
            defaults.len(),
            "docs/configuration.md row: {row}"
        );
        table.extend(keys.into_iter().zip(defaults));
    }
    assert!(!table.is_empty(), "no key table in docs/configuration.md");
    table
}

#[test]
fn the_documented_key_table_matches_the_defaults_key_for_key() {
    let defaults = toml_leaves(invoice_reminder::config::DEFAULTS);
    let readme = documented_key_table();
    // replica_id is documented in default.toml but commented out: its
    // default is computed (hostname-pid).
    assert!(invoice_reminder::config::DEFAULTS.contains("# replica_id ="));
    let mut documented: Vec<String> = defaults.keys().cloned().collect();
    documented.push("replica_id".into());
    let mut in_readme: Vec<String> = readme.keys().cloned().collect();
    documented.sort();
    in_readme.sort();
    assert_eq!(
        in_readme, documented,
        "docs/configuration.md keys vs config/default.toml"
    );
    for (key, value) in &defaults {
        if let toml::Value::Array(_) = value {
            // A list (reminders.stages): its default is shown in
            // docs/writing-reminders.md, which tests/docs checks.
            continue;
        }
        let expected = match value {
            toml::Value::String(s) if s.is_empty() => "empty".to_owned(),
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(
            readme[key], expected,
            "docs/configuration.md default of {key}"
        );
    }
}

#[test]
fn the_binary_runs_from_an_empty_directory_without_a_config_file() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("empty-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = binary()
        .current_dir(&dir)
        .env("INVOICE_REMINDER__DATABASE__CONNECT_TIMEOUT", "1s")
        .arg("status")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The configuration loads (defaults plus env): the failure, if any, is
    // the unreachable database of `binary()`, a runtime error (1), not 2.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("failed to connect to PostgreSQL"),
        "{stderr}"
    );
    assert!(!stderr.contains("config"), "{stderr}");
}

#[test]
fn settings_debug_output_hides_passwords() {
    let settings = Settings::load(&ConfigSource {
        path: Some(common::default_config_path()),
        env: vec![
            (
                "INVOICE_REMINDER__DATABASE__URL".into(),
                "postgres://u:topsecret@h/db".into(),
            ),
            (
                "INVOICE_REMINDER__REDIS__URL".into(),
                "redis://:alsosecret@h:6379".into(),
            ),
            ("INVOICE_REMINDER__SMTP__USERNAME".into(), "mailer".into()),
            ("INVOICE_REMINDER__SMTP__PASSWORD".into(), "12345".into()),
        ],
    })
    .unwrap();
    let printed = format!("{settings:?}");
    for secret in ["topsecret", "alsosecret", "12345"] {
        assert!(!printed.contains(secret), "{printed}");
    }
}

#[test]
fn replica_id_defaults_to_hostname_and_pid() {
    let settings = Settings::load(&ConfigSource {
        path: Some(common::default_config_path()),
        env: vec![],
    })
    .unwrap();
    assert!(
        settings
            .replica_id
            .ends_with(&format!("-{}", std::process::id())),
        "{}",
        settings.replica_id
    );
}
