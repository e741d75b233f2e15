//! `migrate`: applies the embedded migrations under a session advisory
//! lock, so it needs a direct connection (never a transaction pooler).

use std::process::ExitCode;

use super::{UsageError, connect_pool};
use crate::config::Settings;

pub async fn migrate(settings: &Settings) -> anyhow::Result<ExitCode> {
    if settings.database.pooler == crate::config::Pooler::Transaction {
        return Err(UsageError(
            "migrate cannot run through a transaction pooler (database.pooler = \"transaction\"): it takes a session advisory lock; run it with a direct database URL (INVOICE_REMINDER__DATABASE__URL=postgres://...@db-host:5432/... INVOICE_REMINDER__DATABASE__POOLER=none invoice-reminder migrate)".into(),
        )
        .into());
    }
    let pool = connect_pool(settings).await?;
    let applied = crate::operator::admin::migrate(&pool, settings).await?;
    outln!("database is up to date ({applied} migrations)");
    Ok(ExitCode::SUCCESS)
}
