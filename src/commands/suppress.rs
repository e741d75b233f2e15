//! `suppress add|remove|list`: the operator's hand on the suppression list
//! (the bounce webhook adds to it too). Addresses are checked before
//! anything is written: one that does not parse is a usage error (exit 2).

use std::process::ExitCode;

use anyhow::Context as _;

use super::{UsageError, connect, db_failed};
use crate::cli::SuppressAction;
use crate::config::Settings;
use crate::db;
use crate::db::suppressions::{Added, NewSuppression};

/// The reason `suppress add` stores without `--reason`.
pub const DEFAULT_REASON: &str = "manual";

pub(super) async fn suppress(
    settings: &Settings,
    action: SuppressAction,
) -> anyhow::Result<ExitCode> {
    match action {
        SuppressAction::Add { address, reason } => {
            let address = checked(&address)?;
            let reason = reason
                .map(|r| crate::domain::sanitize(&r, 500))
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| DEFAULT_REASON.to_owned());
            let database = connect(settings).await?;
            let added = db::suppressions::add(
                &database,
                NewSuppression {
                    address: &address,
                    reason: &reason,
                    source: "cli",
                    detail: None,
                },
            )
            .await
            .map_err(db_failed("failed to add to the suppression list"))?;
            match added {
                Added::New => outln!("suppressed {address} ({reason})"),
                Added::Updated => outln!("{address} was already suppressed; reason now: {reason}"),
            }
        }
        SuppressAction::Remove { address } => {
            let address = checked(&address)?;
            let database = connect(settings).await?;
            let removed = db::suppressions::remove(&database, &address)
                .await
                .map_err(db_failed("failed to remove from the suppression list"))?;
            if removed {
                outln!("{address} is no longer suppressed");
            } else {
                outln!("{address} was not on the suppression list; nothing changed");
            }
        }
        SuppressAction::List { json } => {
            let database = connect(settings).await?;
            let list = db::suppressions::list(&database)
                .await
                .map_err(db_failed("failed to read the suppression list"))?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&list).context("failed to encode the list")?
                );
            } else if list.is_empty() {
                outln!("the suppression list is empty");
            } else {
                for s in &list {
                    outln!(
                        "{}  {}  {}  {}{}",
                        s.address,
                        s.reason,
                        s.source,
                        s.suppressed_at.format("%Y-%m-%d %H:%M:%S UTC"),
                        s.detail
                            .as_deref()
                            .map(|d| format!("  ({d})"))
                            .unwrap_or_default()
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `address` as an email address (trimmed), or a usage error naming it.
pub fn checked(address: &str) -> anyhow::Result<String> {
    let trimmed = address.trim();
    trimmed
        .parse::<lettre::Address>()
        .map(|a| a.to_string())
        .map_err(|e| {
            UsageError(format!(
                "{:?} is not an email address: {e}",
                crate::domain::sanitize(trimmed, 100)
            ))
            .into()
        })
}
