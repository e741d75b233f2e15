//! The images and ports of `docker-compose.yml` and the bases of the
//! `Dockerfile`: a user with Docker Hub runs exactly what the README says,
//! unchanged, and gets the official images; tests/compose/check.sh swaps in
//! stand-ins only through the variables and build args checked here; no
//! port is published beyond this machine unless someone writes it so.

use serde_norway::Value;

use super::{COMPOSE_FILE, compose, compose_text, compose_value, repo};

/// `text` as compose interpolates it with no variable set: `${NAME:-default}`
/// and `${NAME-default}` become the default, `$$` a `$`. A variable without
/// a default would come from the user's shell; it panics, naming it.
pub fn in_a_clean_shell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let body = after
            .strip_prefix('{')
            .and_then(|b| b.split_once('}'))
            .unwrap_or_else(|| {
                let at: String = after.chars().take(30).collect();
                panic!("{COMPOSE_FILE}: a variable without braces (and default) at ${at:?}")
            });
        let (expression, tail) = body;
        let default = expression
            .split_once(":-")
            .or_else(|| expression.split_once('-'))
            .map(|(_, default)| default)
            .filter(|default| !default.is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "{COMPOSE_FILE}: ${{{expression}}} has no default, so it comes from the shell"
                )
            });
        out.push_str(default);
        rest = tail;
    }
    out.push_str(rest);
    out
}

#[test]
fn every_variable_of_the_compose_file_has_a_default() {
    // Panics naming the first variable without one.
    let interpolated = in_a_clean_shell(&compose_text());
    assert_ne!(interpolated, compose_text(), "the images are variables");
}

#[test]
fn every_image_is_a_variable_whose_default_is_the_official_image() {
    let text = compose_text();
    for (variable, official) in [
        ("POSTGRES_IMAGE", "postgres:16"),
        ("REDIS_IMAGE", "redis:7"),
        ("MAILPIT_IMAGE", "axllent/mailpit"),
        ("PROMETHEUS_IMAGE", "prom/prometheus"),
    ] {
        let line = format!("image: ${{{variable}:-{official}}}");
        assert!(text.contains(&line), "{COMPOSE_FILE} should say `{line}`");
    }
    let compose = compose();
    for (name, service) in &compose.services {
        let image = service.image.as_deref().unwrap_or_default();
        assert!(
            !image.starts_with("invoice-reminder-check/"),
            "{name} runs a check's stand-in ({image}) by default"
        );
    }
}

#[test]
fn every_published_port_is_bound_to_loopback() {
    let value = compose_value();
    let services = value["services"].as_mapping().expect("services");
    let mut published = 0;
    for (name, service) in services {
        let Some(ports) = service.get("ports").and_then(Value::as_sequence) else {
            continue;
        };
        for port in ports {
            let spec = port
                .as_str()
                .unwrap_or_else(|| panic!("{name:?}: {port:?}"));
            assert!(
                spec.starts_with("127.0.0.1:"),
                "{name:?} publishes {spec:?} beyond this machine"
            );
            published += 1;
        }
    }
    assert!(published >= 2, "mailpit's UI and Prometheus are published");
}

#[test]
fn the_dockerfile_takes_its_bases_as_build_args_with_the_official_defaults() {
    let path = repo().join("Dockerfile");
    let text = std::fs::read_to_string(&path).expect("read the Dockerfile");
    assert!(
        !text.lines().any(|l| l.starts_with("# syntax=")),
        "a `# syntax=` line fetches a frontend image from a registry"
    );
    for line in [
        "ARG RUST_IMAGE=rust:",
        "ARG RUNTIME_IMAGE=debian:bookworm-slim",
        "FROM ${RUST_IMAGE} AS builder",
        "FROM ${RUNTIME_IMAGE} AS runtime",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "the Dockerfile should say `{line}`"
        );
    }
}
