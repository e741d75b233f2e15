//! One file per subcommand: connect what it needs, do it, print the
//! result. This file dispatches, and holds what several commands share:
//! the usage error, the exit codes, connecting and naming a failed
//! statement. Errors carry context (`failed to ...`) and are logged once, by
//! `main`, which also maps them to exit codes.

/// `println!` that returns an error instead of panicking when stdout is
/// closed (`invoice-reminder audit | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod audit;
mod check_source;
mod dkim_record;
pub mod explain;
mod health;
mod migrate;
mod next;
pub mod preview;
pub mod resolve;
mod run;
mod run_once;
mod seed;
mod source_problems;
mod status;
pub mod suppress;

use std::process::ExitCode;

use crate::cli::Command;
use crate::config::Settings;
use crate::db;

pub use audit::{AuditReport, build_report, unknown_mails};
pub use run_once::{DryRun, dry_run};
pub use source_problems::{FIX_HINT, SourceProblems, survey};
pub use status::lock_holder;

/// A command used wrongly for this configuration: `main` exits 2 with it.
/// The one error type for exit 2 after the settings load: a template that
/// does not load, a source view that breaks its contract and a command's
/// wrong arguments all become this, where they are met.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The tick's context for a command. A template that does not load is a
/// configuration problem (exit 2), like a bad setting.
pub(crate) fn context(
    settings: Settings,
    pool: sqlx::PgPool,
) -> anyhow::Result<crate::tick::context::Context> {
    use crate::tick::context::{Context, SetupError};
    let ctx = Context::new(settings, pool).map_err(|e| match e {
        SetupError::Templates(t) => UsageError(t.to_string()).into(),
        other => anyhow::Error::new(other),
    })?;
    // A relay's throttle may pause a tick for half of its bound, so the
    // tick ends `throttled` well before it would count as hung.
    let bound = crate::schedule::max_tick_duration(&ctx.settings) / 2;
    ctx.mailer.pacer().bound_pauses(bound);
    Ok(ctx)
}

/// Process exit codes.
pub mod exit {
    /// Runtime failure, or `audit` found duplicates.
    pub const FAILURE: u8 = 1;
    /// Bad configuration or usage.
    pub const USAGE: u8 = 2;
}

pub async fn dispatch(command: Command, settings: Settings) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => migrate::migrate(&settings).await,
        Command::Seed {
            customers,
            invoices,
            overdue_pct,
            if_empty,
        } => seed::seed(&settings, customers, invoices, overdue_pct, if_empty).await,
        Command::RunOnce { dry_run } => run_once::run_once(settings, dry_run).await,
        Command::Run => run::run(settings).await,
        Command::Audit {
            json,
            unknown_after,
        } => audit::audit(&settings, json, unknown_after).await,
        Command::Preview {
            invoice,
            customer,
            step,
            locale,
            html,
        } => {
            let request = preview::Request {
                invoice: invoice.unwrap_or_default(),
                customer,
                step,
                locale,
                html,
            };
            preview::preview(&settings, request).await
        }
        Command::Next { count, from, json } => next::next(&settings, count, from, json),
        Command::Resolve { sent, resend } => resolve::resolve(&settings, sent, resend).await,
        Command::Health { url } => health::health(&settings, url).await,
        Command::Status { json, runs } => status::status(settings, json, runs).await,
        Command::CheckSource => check_source::check_source(&settings).await,
        Command::Explain {
            invoice,
            customer,
            json,
            raw,
        } => {
            let target = match (invoice, customer) {
                (Some(id), _) => explain::Target::Invoice(id),
                (None, Some(id)) => explain::Target::Customer(id),
                (None, None) => {
                    return Err(
                        UsageError("explain needs --invoice ID or --customer ID".into()).into(),
                    );
                }
            };
            explain::explain(&settings, target, json, raw).await
        }
        Command::Suppress { action } => suppress::suppress(&settings, action).await,
        Command::DkimRecord => dkim_record::dkim_record(&settings),
        // `main` runs the console: it sits above the commands it reuses.
        Command::Console { .. } => Err(UsageError("the console is started by main".into()).into()),
    }
}

/// Checks `source.relation` against the source contract: a relation that
/// does not satisfy it is a configuration error (exit 2) naming it.
async fn check_source(db: &db::Db) -> anyhow::Result<()> {
    db::source::check(db).await.map_err(|e| match e {
        e @ db::source::SourceError::Contract(_) => UsageError(e.to_string()).into(),
        db::source::SourceError::Database(e) => {
            anyhow::Error::new(e).context("failed to check source.relation")
        }
    })
}

/// Connects now, so a command fails fast with the real cause. Its calls
/// run under `database.command_timeout`.
async fn connect(settings: &Settings) -> anyhow::Result<db::Db> {
    let pool = connect_pool(settings).await?;
    Ok(db::Db::for_commands(pool, settings))
}

/// The error of a command's statement, with `doing` as context; it points
/// at `migrate` only when a table or schema of ours is missing (a timeout
/// names its own setting, see `db::conn::timed_out`).
fn db_failed(doing: &'static str) -> impl FnOnce(sqlx::Error) -> anyhow::Error {
    move |e| {
        let missing = matches!(&e, sqlx::Error::Database(d)
            if d.code().is_some_and(|c| c == "42P01" || c == "3F000"));
        let e = anyhow::Error::new(e);
        if missing {
            e.context(format!("{doing} (did you run `migrate`?)"))
        } else {
            e.context(doing)
        }
    }
}

async fn connect_pool(settings: &Settings) -> anyhow::Result<sqlx::PgPool> {
    db::connect(settings).await.map_err(|e| {
        let url = settings.database.redacted_url();
        if crate::db::conn::is_refused_login(&e) {
            UsageError(format!(
                "database.url: PostgreSQL at {url} refused the login ({}); check the user and password in database.url",
                crate::causes::Causes(&e)
            ))
            .into()
        } else {
            anyhow::Error::new(e).context(format!("failed to connect to PostgreSQL at {url}"))
        }
    })
}
