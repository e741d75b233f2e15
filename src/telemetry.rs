//! Structured logs, set up once: human-readable (`pretty`) or one JSON
//! object per line (`json`) on stderr, filtered by `log.level`.
//!
//! Logs go to stderr so stdout stays clean for command output
//! (`audit --json`, `status --json`, `run-once --dry-run`).
//! Nothing secret is ever logged: settings are printed redacted and the
//! crate never logs URLs or passwords.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber. A second call is a no-op (tests).
pub fn init(log: &LogSettings) {
    let mut filter = EnvFilter::try_new(&log.level).unwrap_or_else(|_| EnvFilter::new("info"));
    // The scheduler crate logs its own start-up at info; keep it quiet
    // unless the operator asked for it by name.
    if !log.level.contains("tokio_cron_scheduler")
        && let Ok(directive) = "tokio_cron_scheduler=warn".parse()
    {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match log.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .flatten_event(true)
            .try_init(),
        LogFormat::Pretty => builder.with_target(false).try_init(),
    };
}
