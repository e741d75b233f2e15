//! Shutdown, in one place: from the signal to the release, for the daemon
//! (`run`, [`run_until_signalled`]) and the one-tick commands
//! ([`listen`], [`release`]).
//!
//! The sequence:
//! 1. **Signal.** SIGTERM or SIGINT cancels one [`CancellationToken`]
//!    ([`listen`]). A second signal exits at once with code 130: rows in
//!    flight stay `sending` (unknown), which is the at-most-once side of the
//!    trade.
//! 2. **Stop scheduling.** The scheduler loop (`schedule`) fires no more
//!    ticks; the tick in flight stops *starting* mail (mail already handed
//!    to SMTP finishes), hands back what it claimed but did not send and
//!    records its run.
//! 3. **Grace wait.** The tick in flight gets `shutdown.timeout` to get
//!    there and, once the loop ended, to close the SMTP pool and release
//!    the lock ([`close_the_tick`]); past it the process exits 1 and the rows it was sending stay
//!    `sending`. A hung tick (`schedule.max_tick_duration`) is stopped the
//!    same way, and exits 1.
//! 4. **Release.** The HTTP listener and the flusher of deferred results
//!    stop, results the database would not take are written while it
//!    allows ([`EXIT_FLUSH_WAIT`]), and the database connections close.
//!
//! Then the process exits 0, or 1 as above. A configuration problem a tick
//! finds (`schedule::ConfigurationProblem`) ends the daemon at once, for
//! exit 2 ([`Ending::Misconfigured`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::liveness::Liveness;
use crate::schedule::ConfigurationProblem;
use crate::tick::context::Context;

/// How long an exiting process keeps trying to write results the database
/// could not take during the tick.
pub const EXIT_FLUSH_WAIT: Duration = Duration::from_secs(10);

/// Spawns the signal listener and returns the token it cancels.
pub fn listen() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let first = wait_for_signal().await;
        tracing::info!(
            signal = first,
            "shutdown requested; finishing the mail in flight"
        );
        trigger.cancel();
        let second = wait_for_signal().await;
        tracing::warn!(signal = second, "second signal; exiting immediately");
        std::process::exit(130);
    });
    token
}

/// What runs beside the scheduler loop, stopped once the loop is over.
pub struct Beside {
    /// Cancelled once the loop is over: stops the HTTP listener and the
    /// flusher of deferred results.
    pub stop: CancellationToken,
    /// The HTTP listener, when `http.listen` is set.
    pub http: Option<JoinHandle<()>>,
    /// Writes deferred results as soon as the database takes them.
    pub flusher: JoinHandle<()>,
}

/// How the daemon ended, once released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Stopped by a signal, the tick in flight finished: exit 0.
    Stopped,
    /// Stopped for a reason already logged (a hung tick, a scheduler loop
    /// that ended or died): exit 1, so the replica is restarted.
    Failed,
    /// A tick found a problem no retry can fix (a [`ConfigurationProblem`]):
    /// the daemon ends at once, nothing released, for exit 2.
    Misconfigured(String),
}

/// Runs the scheduler loop until a signal (`signal`, from [`listen`]) or a
/// failure stops it, then waits for the tick in flight and releases what
/// the process holds (the steps in the module note). An error is a
/// runtime failure (exit 1).
pub async fn run_until_signalled(
    ctx: Arc<Context>,
    liveness: Liveness,
    signal: CancellationToken,
    beside: Beside,
) -> anyhow::Result<Ending> {
    let grace = ctx.settings.shutdown.timeout;
    let mut worker = tokio::spawn(crate::schedule::run_until_stopped(
        ctx.clone(),
        signal.clone(),
        liveness.clone(),
    ));
    // Who stopped the loop, and how it ended (None: not within the grace).
    let (why, ended) = tokio::select! {
        biased;
        _ = signal.cancelled() => (Why::Signal, wait_for_the_tick(&ctx, worker, grace).await),
        failure = liveness.overrun() => {
            tracing::error!(%failure, "the replica is hung; stopping so it is restarted");
            signal.cancel();
            (Why::Hung, wait_for_the_tick(&ctx, worker, grace).await)
        }
        ended = &mut worker => {
            if let Ok(Err(e)) = &ended
                && let Some(problem) = e.downcast_ref::<ConfigurationProblem>()
            {
                // Found at run time: exit 2 with it, at once.
                return Ok(Ending::Misconfigured(problem.0.clone()));
            }
            if matches!(ended, Ok(Ok(()))) {
                close_the_tick(&ctx).await;
            }
            (Why::ByItself, Some(ended))
        }
    };
    let ending = match (why, ended) {
        (_, None) => Err(anyhow::anyhow!(
            "the tick in flight did not finish within shutdown.timeout ({}); rows it was sending stay 'sending'",
            humantime::format_duration(grace)
        )),
        // A signal arrived while the loop was ending: a normal stop.
        (Why::ByItself, Some(ended)) if signal.is_cancelled() => ending_of(ended, false),
        (Why::ByItself, Some(ended)) => {
            match ended {
                Ok(Ok(())) => tracing::error!(
                    "the scheduler loop ended by itself; exiting so the replica is restarted"
                ),
                Ok(Err(e)) => tracing::error!(
                    error = crate::causes::of_anyhow(&e),
                    "the scheduler loop failed; exiting so the replica is restarted"
                ),
                Err(e) => {
                    tracing::error!(error = %e, "the scheduler task died; exiting so the replica is restarted")
                }
            }
            Ok(Ending::Failed)
        }
        (why, Some(ended)) => ending_of(ended, why == Why::Hung),
    };
    beside.stop.cancel();
    let _ = beside.flusher.await;
    if let Some(http) = beside.http {
        let _ = tokio::time::timeout(Duration::from_secs(1), http).await;
    }
    let unwritten = release(&ctx).await;
    if unwritten > 0 && matches!(ending, Ok(Ending::Stopped)) {
        anyhow::bail!(
            "{unwritten} delivery result(s) could not be written before exit (logged above with their Message-IDs)"
        );
    }
    ending
}

/// What a tick held until its end, given back once no tick runs: the SMTP
/// pool's connections (each told QUIT) and the lease.
pub async fn close_the_tick(ctx: &Context) {
    ctx.mailer.shutdown().await;
    ctx.lock.finish().await;
}

/// The last step of every exit: writes the results the database would not
/// take while it allows ([`EXIT_FLUSH_WAIT`]), then closes the database
/// connections. Returns how many results are left unwritten (each logged).
pub async fn release(ctx: &Context) -> usize {
    let unwritten = ctx
        .deferred
        .flush_before_exit(&ctx.db, EXIT_FLUSH_WAIT, &ctx.settings.lock)
        .await;
    ctx.close_database().await;
    unwritten
}

/// Who stopped the scheduler loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The operator (SIGTERM, SIGINT).
    Signal,
    /// The supervisor: a tick ran past `schedule.max_tick_duration`.
    Hung,
    /// Nobody: it ended or died by itself.
    ByItself,
}

type Worker = JoinHandle<anyhow::Result<()>>;

/// Waits up to `grace` for the tick in flight after a stop was requested,
/// and for the loop to close what the tick held ([`close_the_tick`], once
/// the loop ended well). None: the grace ran out first.
async fn wait_for_the_tick(
    ctx: &Context,
    worker: Worker,
    grace: Duration,
) -> Option<Result<anyhow::Result<()>, tokio::task::JoinError>> {
    let ended = async {
        let ended = worker.await;
        if matches!(ended, Ok(Ok(()))) {
            close_the_tick(ctx).await;
        }
        ended
    };
    tokio::time::timeout(grace, ended).await.ok()
}

/// `hung`: the supervisor asked, not the operator (exit 1 either way).
fn ending_of(
    ended: Result<anyhow::Result<()>, tokio::task::JoinError>,
    hung: bool,
) -> anyhow::Result<Ending> {
    match ended {
        Ok(Ok(())) if !hung => {
            tracing::info!("worker stopped");
            Ok(Ending::Stopped)
        }
        Ok(Ok(())) => Ok(Ending::Failed),
        Ok(Err(e)) => Err(e),
        Err(join) => Err(anyhow::anyhow!("worker task failed: {join}")),
    }
}

#[cfg(unix)]
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers we can only wait for ctrl-c.
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() -> &'static str {
    let _ = tokio::signal::ctrl_c().await;
    "ctrl-c"
}
