//! The `invoice-reminder` binary: parse the command line, load and validate
//! the configuration, start logging, dispatch, map errors to exit codes
//! (2: bad configuration or usage; 1: runtime failure or duplicates found).

use std::process::ExitCode;

use clap::Parser;
use invoice_reminder::cli::{self, Cli};
use invoice_reminder::commands::exit;
use invoice_reminder::config::{ConfigSource, Settings};
use invoice_reminder::{causes, telemetry};

// jemalloc: the worker allocates per message (rendering, MIME encoding, rows),
// and with glibc's allocator malloc and free took a large share of its CPU
// (BENCHMARKS.md, "jemalloc").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::load(&ConfigSource::from_process(cli.config.clone())) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("invoice-reminder: configuration error: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    telemetry::init(&settings.log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "failed to start the async runtime");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(cli::dispatch(cli.command, settings)) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if is_configuration(&e) => {
            eprintln!("invoice-reminder: configuration error: {e}");
            ExitCode::from(exit::USAGE)
        }
        Err(e) => {
            tracing::error!(error = causes::of_anyhow(&e), "command failed");
            ExitCode::from(exit::FAILURE)
        }
    }
}

/// A problem found after the settings loaded, before anything ran: the
/// commands turn each into `UsageError` (exit 2, like bad settings).
fn is_configuration(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|cause| cause.is::<invoice_reminder::operator::UsageError>())
}

/// The reader of our stdout went away (`| head`): not a failure.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
