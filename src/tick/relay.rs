//! The relay's rate across ticks (`mail::pace`): read from the database as
//! a tick starts, so every replica holds what the relay last took, with a
//! bound on how long a throttle may halt this tick; after the tick, what
//! the pacer learnt is stored, logged and in `/metrics`
//! (docs/operating.md, "A relay that throttles"). Neither step fails a
//! tick: without the database the replica keeps the rate it has.

use tokio::time::Instant;

use super::context::Context;
use crate::db;

/// Holds this tick to the stored rate; a halt may last the pacer's bound
/// from `started` (half of `schedule.max_tick_duration`), so the tick ends
/// `throttled` well before it would count as hung.
pub(super) async fn before_tick(ctx: &Context, started: Instant) {
    let pacer = ctx.mailer.pacer();
    match db::relay_pace::read(&ctx.db, &ctx.settings.smtp.relay()).await {
        Ok(Some(learned)) => pacer.restore(learned),
        Ok(None) => {}
        Err(e) => {
            tracing::debug!(error = %e, "the relay's rate could not be read; keeping this replica's")
        }
    }
    pacer.tick_started(started);
    // What the relay does is watched from here.
    let _ = pacer.take_seen();
}

/// Stores, logs and shows what the relay did with this tick's mail.
pub(super) async fn after_tick(ctx: &Context) {
    let pacer = ctx.mailer.pacer();
    pacer.ended();
    let seen = pacer.take_seen();
    let learned = pacer.learned();
    ctx.metrics.smtp_pace(pacer.per_second());
    ctx.metrics.smtp_refused(seen.refused);
    if let Some(measured) = learned.measured.filter(|_| seen.halts > 0) {
        ctx.metrics.smtp_accepted(measured);
    }
    if seen.refused > 0 {
        tracing::warn!(
            accepted = seen.accepted,
            refused = seen.refused,
            halts = seen.halts,
            per_second = pacer.per_second().unwrap_or(0.0),
            "the SMTP relay throttled this tick: it accepted {} message(s) and refused {} (in {} halt(s)); sending is paced at {}",
            seen.accepted,
            seen.refused,
            seen.halts,
            pacer
                .per_second()
                .map_or("no limit".to_owned(), |r| format!("{r:.2} a second")),
        );
    }
    if seen.accepted == 0 && seen.refused == 0 {
        return;
    }
    let connections = i32::try_from(ctx.settings.smtp.pool_size).unwrap_or(i32::MAX);
    if let Err(e) = db::relay_pace::write(
        &ctx.db,
        &ctx.settings.smtp.relay(),
        &learned,
        seen.halts > 0,
        connections,
    )
    .await
    {
        tracing::debug!(error = %e, "the relay's rate could not be stored; this replica keeps it");
    }
}
