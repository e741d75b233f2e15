//! `run`: the daemon. Ticks on `schedule.cron` until SIGTERM/SIGINT, then
//! waits up to `shutdown.timeout` for the tick in flight.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::config::Settings;
use crate::context::Context;
use crate::db;

pub(super) async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    let shutdown = crate::shutdown::listen();
    let grace = settings.shutdown.timeout;
    let pool = db::connect_lazy(&settings);
    let ctx = Arc::new(Context::new(settings, pool).context("failed to set up the lock backend")?);
    tracing::info!(
        replica_id = %ctx.settings.replica_id,
        database = %ctx.settings.database.redacted_url(),
        lock = %ctx.lock.describe(),
        "worker starting"
    );
    let worker = tokio::spawn(crate::schedule::run_until_stopped(
        ctx.clone(),
        shutdown.clone(),
    ));
    shutdown.cancelled().await;
    match tokio::time::timeout(grace, worker).await {
        Ok(Ok(Ok(()))) => {
            tracing::info!("worker stopped");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(join)) => Err(anyhow::anyhow!("worker task failed: {join}")),
        Err(_) => {
            anyhow::bail!(
                "the tick in flight did not finish within shutdown.timeout ({}); rows it was sending stay 'sending'",
                humantime::format_duration(grace)
            )
        }
    }
}
