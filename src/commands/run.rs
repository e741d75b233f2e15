//! `run`: the daemon. Ticks on `schedule.cron` until SIGTERM/SIGINT, serves
//! `/healthz`, `/readyz` and `/metrics` when `http.listen` is set (and the
//! bounce webhook, see `http`), and
//! exits non-zero (after logging why) when its scheduler loop dies or a
//! tick runs past `schedule.max_tick_duration`: an orchestrator restarts a
//! process that exits, and the lease and the claim keep that safe. How it
//! stops is `crate::shutdown`'s, start to end.

use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::exit;
use crate::config::Settings;
use crate::db;
use crate::liveness::Liveness;
use crate::shutdown::{Beside, Ending};

pub async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    crate::http::files::ensure_open_files(&settings).map_err(super::UsageError)?;
    let signal = crate::shutdown::listen();
    let liveness = Liveness::new(crate::schedule::max_tick_duration(&settings));
    let pool = db::connect_lazy(&settings);
    let ctx = Arc::new(super::context(settings, pool)?);
    let stop = CancellationToken::new();
    let http = crate::http::bind(ctx.clone(), liveness.clone(), stop.clone()).await?;
    tracing::info!(
        replica_id = %ctx.settings.replica_id,
        database = %ctx.settings.database.redacted_url(),
        lock = %ctx.lock.describe(),
        max_tick_duration = %humantime::format_duration(crate::schedule::max_tick_duration(&ctx.settings)),
        "worker starting"
    );
    // Results the database would not take are written as soon as it does,
    // not only at the next tick (their runs' leases are kept meanwhile).
    let flusher = {
        let (ctx, stop) = (ctx.clone(), stop.clone());
        tokio::spawn(async move {
            ctx.deferred
                .keep_flushing(&ctx.db, &ctx.settings.lock, &stop)
                .await
        })
    };
    let beside = Beside {
        stop,
        http,
        flusher,
    };
    match crate::shutdown::run_until_signalled(ctx, liveness, signal, beside).await {
        Ok(Ending::Stopped) => Ok(ExitCode::SUCCESS),
        Ok(Ending::Failed) => Ok(ExitCode::from(exit::FAILURE)),
        Ok(Ending::Misconfigured(problem)) => Err(super::UsageError(problem).into()),
        Err(e) => Err(e),
    }
}
