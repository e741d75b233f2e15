//! `suppress add|remove|list`: the operator's hand on the suppression list
//! (the bounce webhook adds to it too). Addresses are checked before
//! anything is written: one that does not parse is a usage error (exit 2).
//! What each does is `operator::suppress`; this file prints.

use std::process::ExitCode;

use anyhow::Context as _;

use super::{db_failed, desk};
use crate::config::Settings;
use crate::operator::Actor;
use crate::operator::suppress::{Added, checked, reason};

/// `suppress add ADDRESS [--reason TEXT]`.
pub async fn add(
    settings: &Settings,
    address: &str,
    given: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let address = checked(address)?;
    let reason = reason(given);
    let desk = desk(settings).await?;
    let added = crate::operator::suppress::add(&desk, &address, &reason, Actor::CommandLine)
        .await
        .map_err(db_failed("failed to add to the suppression list"))?;
    match added {
        Added::New => outln!("suppressed {address} ({reason})"),
        Added::Updated => outln!("{address} was already suppressed; reason now: {reason}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `suppress remove ADDRESS`.
pub async fn remove(settings: &Settings, address: &str) -> anyhow::Result<ExitCode> {
    let address = checked(address)?;
    let desk = desk(settings).await?;
    let removed = crate::operator::suppress::remove(&desk, &address, Actor::CommandLine)
        .await
        .map_err(db_failed("failed to remove from the suppression list"))?;
    if removed {
        outln!("{address} is no longer suppressed");
    } else {
        outln!("{address} was not on the suppression list; nothing changed");
    }
    Ok(ExitCode::SUCCESS)
}

/// `suppress list [--json]`.
pub async fn list(settings: &Settings, json: bool) -> anyhow::Result<ExitCode> {
    let list = desk(settings)
        .await?
        .suppressions()
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
    Ok(ExitCode::SUCCESS)
}
