//! The relay's pace across ticks (`mail::pace`): read from the database as
//! a tick starts, so every replica sends at what the relay last took; after
//! the tick, the next pace from what the relay did with its mail, stored,
//! logged and in `/metrics` (docs/operating.md, "A relay that throttles").
//! Neither step fails a tick: without the database the replica keeps the
//! pace it has.

use super::context::Context;
use crate::db;
use crate::db::relay_pace::StoredPace;
use crate::mail::pace::{Pace, next_pace};

/// The relay the pace is about.
fn relay(ctx: &Context) -> String {
    let smtp = &ctx.settings.smtp;
    format!("{}:{}", smtp.host, smtp.port)
}

/// Sends this tick at the stored pace, within the configured one.
pub(super) async fn before_tick(ctx: &Context) {
    let configured = ctx.mailer.configured_pace();
    let pace = match db::relay_pace::read(&ctx.db, &relay(ctx)).await {
        Ok(stored) => configured.within(stored.map(|s| Pace {
            per_second: s.per_second,
            connections: u32::try_from(s.connections).unwrap_or(1),
        })),
        Err(e) => {
            tracing::debug!(error = %e, "the relay's pace could not be read; keeping this replica's");
            ctx.mailer.current_pace()
        }
    };
    if pace != ctx.mailer.current_pace() {
        ctx.mailer.set_pace(pace).await;
    }
    // What the relay does is watched from here.
    let _ = ctx.mailer.take_seen();
}

/// The next pace, from what the relay did with this tick's mail.
pub(super) async fn after_tick(ctx: &Context) {
    let seen = ctx.mailer.take_seen();
    let now = ctx.mailer.current_pace();
    let next = next_pace(now, &seen, ctx.mailer.configured_pace());
    let accepted = seen.accepted_per_second();
    if seen.throttled {
        ctx.metrics.smtp_throttled(accepted);
        tracing::warn!(
            accepted = seen.accepted,
            seconds = seen.sending.as_secs_f64(),
            accepted_per_second = accepted.unwrap_or(0.0),
            next_per_second = next.per_second.unwrap_or(0.0),
            connections = next.connections,
            "the SMTP relay throttled this tick after accepting {} message(s) in {:.1}s ({:.1}/s); the next tick sends at most {:.1}/s over {} connection(s). Set smtp.max_per_second a little below the accepted rate to stay clear of its limit",
            seen.accepted,
            seen.sending.as_secs_f64(),
            accepted.unwrap_or(0.0),
            next.per_second.unwrap_or(0.0),
            next.connections
        );
    }
    ctx.metrics.smtp_pace(next.per_second);
    if next == now && !seen.throttled {
        return;
    }
    if !seen.throttled {
        tracing::info!(
            per_second = next.per_second.unwrap_or(0.0),
            connections = next.connections,
            "the SMTP relay took this tick's mail without throttling; sending a little faster"
        );
    }
    ctx.mailer.set_pace(next).await;
    let stored = StoredPace {
        per_second: next.per_second,
        connections: i32::try_from(next.connections).unwrap_or(i32::MAX),
    };
    let throttled = seen.throttled.then_some(accepted);
    if let Err(e) = db::relay_pace::write(&ctx.db, &relay(ctx), stored, throttled).await {
        tracing::debug!(error = %e, "the relay's pace could not be stored; this replica keeps it");
    }
}
