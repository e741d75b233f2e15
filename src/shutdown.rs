//! The shutdown signal every long-running task listens to.
//!
//! SIGTERM or SIGINT cancels one [`CancellationToken`]. The scheduler stops
//! firing, the tick in flight stops *starting* mail (mail already handed to
//! SMTP finishes), hands back what it claimed but did not send, records its
//! run and releases the lock; then the process exits 0. A second signal
//! exits at once with code 130: rows in flight stay `sending` (unknown),
//! which is the at-most-once side of the trade.

use tokio_util::sync::CancellationToken;

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
