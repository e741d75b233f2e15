//! `run`: the daemon. Ticks on `schedule.cron` until SIGTERM/SIGINT, serves
//! `/healthz`, `/readyz` and `/metrics` when `http.listen` is set (and the
//! bounce webhook, see `http`), and
//! exits non-zero (after logging why) when its scheduler loop dies or a
//! tick runs past `schedule.max_tick_duration`: an orchestrator restarts a
//! process that exits, and the lease and the claim keep that safe.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::exit;
use crate::config::Settings;
use crate::db;
use crate::liveness::Liveness;

pub(super) async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    crate::http::files::ensure_open_files(&settings).map_err(super::UsageError)?;
    let shutdown = crate::shutdown::listen();
    let grace = settings.shutdown.timeout;
    let liveness = Liveness::new(crate::schedule::max_tick_duration(&settings));
    let pool = db::connect_lazy(&settings);
    let ctx = Arc::new(super::context(settings, pool)?);
    let http_stop = CancellationToken::new();
    let http = crate::http::bind(ctx.clone(), liveness.clone(), http_stop.clone()).await?;
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
        let (ctx, stop) = (ctx.clone(), http_stop.clone());
        tokio::spawn(async move {
            ctx.deferred
                .keep_flushing(&ctx.db, &ctx.settings.lock, &stop)
                .await
        })
    };
    let mut worker = tokio::spawn(crate::schedule::run_until_stopped(
        ctx.clone(),
        shutdown.clone(),
        liveness.clone(),
    ));
    let exit = tokio::select! {
        biased;
        _ = shutdown.cancelled() => stop(worker, grace, false).await,
        failure = liveness.overrun() => {
            tracing::error!(%failure, "the replica is hung; stopping so it is restarted");
            shutdown.cancel();
            stop(worker, grace, true).await
        }
        ended = &mut worker => {
            if let Ok(Err(e)) = &ended
                && let Some(problem) = e.downcast_ref::<crate::schedule::ConfigurationProblem>()
            {
                // A configuration problem found at run time: exit 2 with it.
                return Err(super::UsageError(problem.0.clone()).into());
            }
            if shutdown.is_cancelled() {
                // A signal arrived while the loop was ending: a normal stop.
                exit_code(ended, false)
            } else {
                match ended {
                    Ok(Ok(())) => tracing::error!("the scheduler loop ended by itself; exiting so the replica is restarted"),
                    Ok(Err(e)) => tracing::error!(error = crate::causes::of_anyhow(&e), "the scheduler loop failed; exiting so the replica is restarted"),
                    Err(e) => tracing::error!(error = %e, "the scheduler task died; exiting so the replica is restarted"),
                }
                Ok(ExitCode::from(exit::FAILURE))
            }
        }
    };
    http_stop.cancel();
    let _ = flusher.await;
    if let Some(http) = http {
        let _ = tokio::time::timeout(Duration::from_secs(1), http).await;
    }
    let unwritten = ctx
        .deferred
        .flush_before_exit(
            &ctx.db,
            super::run_once::EXIT_FLUSH_WAIT,
            &ctx.settings.lock,
        )
        .await;
    ctx.close_database().await;
    if unwritten > 0 && matches!(exit, Ok(code) if code == ExitCode::SUCCESS) {
        anyhow::bail!(
            "{unwritten} delivery result(s) could not be written before exit (logged above with their Message-IDs)"
        );
    }
    exit
}

type Worker = tokio::task::JoinHandle<anyhow::Result<()>>;

/// Waits up to `grace` for the tick in flight after a stop was requested.
/// `hung`: the supervisor asked, not the operator (exit 1 either way).
async fn stop(worker: Worker, grace: Duration, hung: bool) -> anyhow::Result<ExitCode> {
    match tokio::time::timeout(grace, worker).await {
        Ok(ended) => exit_code(ended, hung),
        Err(_) => anyhow::bail!(
            "the tick in flight did not finish within shutdown.timeout ({}); rows it was sending stay 'sending'",
            humantime::format_duration(grace)
        ),
    }
}

fn exit_code(
    ended: Result<anyhow::Result<()>, tokio::task::JoinError>,
    hung: bool,
) -> anyhow::Result<ExitCode> {
    match ended {
        Ok(Ok(())) if !hung => {
            tracing::info!("worker stopped");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(())) => Ok(ExitCode::from(exit::FAILURE)),
        Ok(Err(e)) => Err(e),
        Err(join) => Err(anyhow::anyhow!("worker task failed: {join}")),
    }
}
