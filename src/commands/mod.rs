//! One file per subcommand: connect what it needs, ask `operator` or do
//! it, print the result (`cli` dispatches to them). This file holds what
//! several commands share: the exit codes, connecting and checking the
//! source. Errors carry context (`failed to ...`) and are logged once, by
//! `main`, which also maps them to exit codes.

/// `println!` that returns an error instead of panicking when stdout is
/// closed (`invoice-reminder audit | head`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

pub mod audit;
pub mod check_source;
pub mod dkim_record;
pub mod explain;
pub mod health;
pub mod migrate;
pub mod next;
pub mod preview;
pub mod run;
pub mod run_once;
pub mod seed;
pub mod settle;
pub mod status;
pub mod suppress;

use crate::config::Settings;
use crate::db;

pub use crate::operator::UsageError;
pub(crate) use crate::operator::db_failed;
use crate::operator::desk::Desk;
pub use audit::AuditReport;
pub use run_once::{DryRun, dry_run};

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
    // A relay's throttle may halt a tick for half of its bound, so the
    // tick ends `throttled` well before it would count as hung.
    let bound = crate::schedule::max_tick_duration(&ctx.settings) / 2;
    ctx.mailer.pacer().bound_halts(bound);
    Ok(ctx)
}

/// Process exit codes.
pub mod exit {
    /// Runtime failure, or `audit` found duplicates.
    pub const FAILURE: u8 = 1;
    /// Bad configuration or usage.
    pub const USAGE: u8 = 2;
}

/// Connects now, so a command fails fast with the real cause. Its calls
/// run under `database.command_timeout`.
async fn connect(settings: &Settings) -> anyhow::Result<db::Db> {
    let pool = connect_pool(settings).await?;
    Ok(db::Db::for_commands(pool, settings))
}

/// The command's desk (`operator::desk`), connected now.
async fn desk(settings: &Settings) -> anyhow::Result<Desk> {
    let db = connect(settings).await?;
    Ok(Desk::new(db, std::sync::Arc::new(settings.clone())))
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
