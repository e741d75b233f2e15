//! One function per subcommand: connect what it needs, do it, print the
//! result. Errors carry context (`failed to ...`) and are logged once, by
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
pub mod explain;
mod health;
mod preview;
mod resolve;
mod run;
mod run_once;
mod source_problems;
mod status;
mod suppress;

use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::Command;
use crate::config::Settings;
use crate::db;
use crate::db::seed::SeedStep;

pub use audit::{AuditReport, build_report};
pub use run_once::{DryRun, dry_run};

/// `next`: the schedule's next fires, from `schedule::next_fires`.
fn next(
    settings: &Settings,
    count: usize,
    from: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use chrono::SecondsFormat;
    let after = match from {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text.trim())
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| UsageError(format!("--from {text:?} is not an RFC 3339 instant: {e}")))?,
        None => chrono::Utc::now(),
    };
    let fires: Vec<(String, String)> =
        crate::schedule::next_fires(&settings.schedule, after, count)
            .into_iter()
            .map(|f| {
                (
                    f.to_rfc3339_opts(SecondsFormat::Secs, false),
                    f.with_timezone(&chrono::Utc)
                        .to_rfc3339_opts(SecondsFormat::Secs, true),
                )
            })
            .collect();
    if json {
        let list: Vec<serde_json::Value> = fires
            .iter()
            .map(|(local, utc)| serde_json::json!({"local": local, "utc": utc}))
            .collect();
        outln!("{}", serde_json::Value::Array(list));
    } else {
        for (local, utc) in &fires {
            outln!("{local} {utc}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A command used wrongly for this configuration: `main` exits 2 with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Process exit codes.
pub mod exit {
    /// Runtime failure, or `audit` found duplicates.
    pub const FAILURE: u8 = 1;
    /// Bad configuration or usage.
    pub const USAGE: u8 = 2;
}

pub async fn dispatch(command: Command, settings: Settings) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => migrate(&settings).await,
        Command::Seed {
            customers,
            invoices,
            overdue_pct,
            if_empty,
        } => seed(&settings, customers, invoices, overdue_pct, if_empty).await,
        Command::RunOnce { dry_run } => run_once::run_once(settings, dry_run).await,
        Command::Run => run::run(settings).await,
        Command::Audit {
            json,
            unknown_after,
        } => audit::audit(&settings, json, unknown_after).await,
        Command::Preview {
            invoice,
            customer,
            stage,
            locale,
            html,
        } => {
            let request = preview::Request {
                invoice: invoice.unwrap_or_default(),
                customer,
                stage,
                locale,
                html,
            };
            preview::preview(&settings, request).await
        }
        Command::Next { count, from, json } => next(&settings, count, from, json),
        Command::Resolve { sent, resend } => resolve::resolve(&settings, sent, resend).await,
        Command::Health { url } => health::health(&settings, url).await,
        Command::Status { json, runs } => status::status(settings, json, runs).await,
        Command::CheckSource => check_source::check_source(&settings).await,
        Command::Explain {
            invoice,
            customer,
            json,
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
            explain::explain(&settings, target, json).await
        }
        Command::Suppress { action } => suppress::suppress(&settings, action).await,
        Command::DkimRecord => dkim_record(&settings),
    }
}

/// Prints the DNS record for `[smtp.dkim]`'s key (loaded and checked with
/// the settings); usage error when DKIM is off.
fn dkim_record(settings: &Settings) -> anyhow::Result<ExitCode> {
    let Some(dkim) = settings.smtp.dkim.loaded() else {
        return Err(UsageError(
            "DKIM is not configured: set smtp.dkim.domain, smtp.dkim.selector and smtp.dkim.private_key_file".to_owned(),
        )
        .into());
    };
    outln!("{}", dkim.txt_record());
    Ok(ExitCode::SUCCESS)
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
                "database.url: PostgreSQL at {url} refused the login ({e}); check the user and password in database.url"
            ))
            .into()
        } else {
            anyhow::Error::new(e).context(format!("failed to connect to PostgreSQL at {url}"))
        }
    })
}

async fn migrate(settings: &Settings) -> anyhow::Result<ExitCode> {
    if settings.database.pooler == crate::config::Pooler::Transaction {
        return Err(UsageError(
            "migrate cannot run through a transaction pooler (database.pooler = \"transaction\"): it takes a session advisory lock; run it with a direct database URL (INVOICE_REMINDER__DATABASE__URL=postgres://...@db-host:5432/... INVOICE_REMINDER__DATABASE__POOLER=none invoice-reminder migrate)".into(),
        )
        .into());
    }
    let pool = connect_pool(settings).await?;
    db::migrate(&pool, &settings.database.schema)
        .await
        .context("failed to apply migrations")?;
    let applied = db::MIGRATOR.iter().count();
    outln!("database is up to date ({applied} migrations)");
    Ok(ExitCode::SUCCESS)
}

async fn seed(
    settings: &Settings,
    customers: u32,
    invoices: u32,
    overdue_pct: u8,
    if_empty: bool,
) -> anyhow::Result<ExitCode> {
    let pool = connect(settings).await?;
    if if_empty {
        let existing = db::seed::count_invoices(&pool)
            .await
            .map_err(db_failed("failed to count invoices"))?;
        if existing > 0 {
            outln!("the database already has {existing} invoices; not seeding (--if-empty)");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let today = db::today(&pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let stages = &settings.reminders.stages;
    // Owed invoices land in every step's window in turn, so the demo sends
    // every kind of reminder; the rest are paid or not due for a while.
    let steps: Vec<SeedStep> = stages
        .windows(today)
        .iter()
        .map(|w| SeedStep {
            latest_due: w.due_to,
            span: w
                .due_from
                .map_or(10, |from| (w.due_to - from).num_days() as i32 + 1),
        })
        .collect();
    let first = stages.steps().first().map_or(0, |s| s.offset);
    let not_due_after = today + chrono::TimeDelta::days(-first);
    let owed = (u64::from(invoices) * u64::from(overdue_pct) + 50) / 100;
    let seeded = db::seed::seed(
        &pool,
        i64::from(customers),
        i64::from(invoices),
        owed as i64,
        &steps,
        today,
        not_due_after,
    )
    .await
    .map_err(db_failed("failed to insert demo data"))?;
    outln!(
        "seeded {} customers and {} invoices: {} owe a reminder today (spread over {} steps), {} paid, {} not yet due",
        seeded.customers,
        seeded.invoices,
        seeded.owed,
        steps.len(),
        seeded.paid,
        seeded.not_yet_due
    );
    Ok(ExitCode::SUCCESS)
}
