//! Cron wiring: when to fire, and one tick at a time.
//!
//! The next fire is computed here, in `schedule.timezone` with its daylight
//! saving rules ([`next_fires`], which `invoice-reminder next` prints), and
//! the loop fires it on the first beat of tokio-cron-scheduler at or after
//! it (the scheduler beats once a second, on the second, in UTC). A cron job
//! given to tokio-cron-scheduler in the zone itself would fix the zone's
//! UTC offset when the job is created and fire an hour off after the next
//! daylight saving transition, until the process restarts.
//!
//! One tick runs at a time: fires that fall inside a long tick are skipped
//! (logged), never queued or doubled up. Cron expressions have six fields,
//! seconds first (`0 */5 * * * *`), and combine day-of-month and day-of-week
//! with AND. A local time that does not exist (02:30 on a spring-forward
//! day) fires at the first instant after the gap (03:00); one that exists
//! twice (fall-back) fires once, at its first occurrence.

use std::sync::Arc;

use anyhow::Context as _;
use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;

use std::time::Duration;

use crate::config::{MaxTickDuration, ScheduleSettings, Settings};
use crate::liveness::Liveness;
use crate::tick::context::Context;
use crate::tick::{TickOutcome, run_tick_at};

/// The next `count` fires of the schedule strictly after `after`, in the
/// schedule's zone. The one function both `run` and `next` use.
pub fn next_fires(
    schedule: &ScheduleSettings,
    after: DateTime<Utc>,
    count: usize,
) -> Vec<DateTime<Tz>> {
    fires_after(schedule, after).take(count).collect()
}

/// How long one tick may run before the replica counts as hung.
/// `"auto"`: the larger of `shutdown.timeout` and 10 × the longest gap
/// among the next 10 fires of `schedule.cron`, at most one hour.
pub fn max_tick_duration(settings: &Settings) -> Duration {
    const CAP: Duration = Duration::from_secs(3600);
    match settings.schedule.max_tick_duration {
        MaxTickDuration::Fixed(limit) => limit,
        MaxTickDuration::Auto => {
            let fires: Vec<_> = fires_after(&settings.schedule, Utc::now())
                .take(11)
                .collect();
            let longest_gap = fires
                .windows(2)
                .filter_map(|w| (w[1] - w[0]).to_std().ok())
                .max()
                .unwrap_or(CAP);
            (longest_gap * 10).max(settings.shutdown.timeout).min(CAP)
        }
    }
}

/// Every fire strictly after `after`, lazily. Fires fall on whole seconds
/// (the iterator would otherwise carry `after`'s fraction of a second).
fn fires_after(
    schedule: &ScheduleSettings,
    after: DateTime<Utc>,
) -> impl Iterator<Item = DateTime<Tz>> + '_ {
    let whole = after.with_nanosecond(0).unwrap_or(after);
    schedule
        .cron
        .parsed()
        .iter_after(whole.with_timezone(&schedule.timezone))
}

/// Marks the loop stopped when dropped, on every exit path (panics too).
struct LoopRunning<'a>(&'a Liveness);

impl Drop for LoopRunning<'_> {
    fn drop(&mut self) {
        self.0.tick_finished();
        self.0.set_loop_running(false);
    }
}

/// A tick found a problem no retry can fix (a template that does not
/// render, a source that breaks its contract): the loop stops with it, and
/// `run` exits as for bad configuration.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigurationProblem(pub String);

/// Runs ticks on `schedule.cron` until `shutdown` is cancelled, then
/// returns once the tick in flight (if any) has finished; what the ticks
/// held is closed by `crate::shutdown`, which runs this loop. `liveness`
/// learns when the loop runs and when each tick starts and ends.
pub async fn run_until_stopped(
    ctx: Arc<Context>,
    shutdown: CancellationToken,
    liveness: Liveness,
) -> anyhow::Result<()> {
    let schedule = &ctx.settings.schedule;
    // tokio-cron-scheduler beats once a second, on the second, in UTC (no
    // offset to go stale); each beat checks whether the next fire is due.
    let (beats, mut beat) = mpsc::channel::<()>(1);
    let mut scheduler = JobScheduler::new()
        .await
        .context("failed to create the scheduler")?;
    let job = Job::new_async_tz("* * * * * *", Utc, move |_id, _sched| {
        let beats = beats.clone();
        Box::pin(async move {
            let _ = beats.try_send(());
        })
    })
    .context("failed to create the scheduler's beat")?;
    scheduler
        .add(job)
        .await
        .context("failed to add the scheduler's beat")?;
    scheduler
        .start()
        .await
        .context("failed to start the scheduler")?;
    tracing::info!(cron = %schedule.cron, timezone = %schedule.timezone, "scheduler started");
    liveness.set_loop_running(true);
    let _running = LoopRunning(&liveness);
    let mut due = next_fire(schedule, Utc::now())?;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            beat = beat.recv() => {
                if beat.is_none() {
                    break;
                }
            }
        }
        if Utc::now() < due {
            continue;
        }
        let slot = due;
        test_fault("scheduler-panic");
        liveness.tick_started();
        let outcome = run_tick_at(&ctx, &shutdown, Some(slot)).await;
        liveness.tick_finished();
        match outcome {
            Ok(TickOutcome::LockLost(_)) => tracing::warn!("tick cancelled: the lock was lost"),
            Ok(_) => {}
            Err(e) => match e.configuration_problem() {
                // Retrying cannot help: stop, so the process exits 2 with it.
                Some(problem) => return Err(ConfigurationProblem(problem).into()),
                None => tracing::error!(error = %e, "tick failed; the next fire will try again"),
            },
        }
        let now = Utc::now();
        due = next_fire(schedule, now)?;
        let missed = fires_after(schedule, slot)
            .take_while(|f| f.with_timezone(&Utc) <= now)
            .count();
        if missed > 0 {
            tracing::info!(missed, "previous tick still running; skipping this fire");
        }
    }
    if let Err(e) = scheduler.shutdown().await {
        tracing::warn!(error = %e, "scheduler did not shut down cleanly");
    }
    Ok(())
}

/// The first fire after `after`, in UTC.
fn next_fire(schedule: &ScheduleSettings, after: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    match next_fires(schedule, after, 1).pop() {
        Some(fire) => Ok(fire.with_timezone(&Utc)),
        None => anyhow::bail!(
            "schedule.cron {:?} never fires again",
            schedule.cron.as_str()
        ),
    }
}

/// Fault injection for the fault suite, compiled into debug builds only:
/// `INVOICE_REMINDER_TEST_FAULT=scheduler-panic` makes the loop panic on its
/// first fire, to prove that `run` exits when its scheduler dies.
fn test_fault(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("INVOICE_REMINDER_TEST_FAULT").is_ok_and(|v| v == name) {
        panic!("test fault injected: {name}");
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(cron: &str, tz: &str) -> ScheduleSettings {
        let settings = crate::config::Settings::load(&crate::config::ConfigSource {
            path: None,
            env: vec![
                ("INVOICE_REMINDER__SCHEDULE__CRON".into(), cron.into()),
                ("INVOICE_REMINDER__SCHEDULE__TIMEZONE".into(), tz.into()),
            ],
        });
        match settings {
            Ok(s) => s.schedule,
            Err(e) => panic!("{e}"),
        }
    }

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn shown(fires: &[DateTime<Tz>]) -> Vec<String> {
        fires.iter().map(|f| f.to_rfc3339()).collect()
    }

    #[test]
    fn weekday_mornings_in_madrid_stay_at_nine_across_both_2027_transitions() {
        let s = schedule("0 0 9 * * Mon-Fri", "Europe/Madrid");
        // Spring forward: Sunday 2027-03-28 02:00 -> 03:00.
        let spring = next_fires(&s, at("2027-03-25T12:00:00Z"), 3);
        assert_eq!(
            shown(&spring),
            [
                "2027-03-26T09:00:00+01:00",
                "2027-03-29T09:00:00+02:00",
                "2027-03-30T09:00:00+02:00"
            ]
        );
        // Fall back: Sunday 2027-10-31 03:00 -> 02:00.
        let fall = next_fires(&s, at("2027-10-28T12:00:00Z"), 3);
        assert_eq!(
            shown(&fall),
            [
                "2027-10-29T09:00:00+02:00",
                "2027-11-01T09:00:00+01:00",
                "2027-11-02T09:00:00+01:00"
            ]
        );
    }

    #[test]
    fn a_time_inside_the_spring_forward_gap_fires_right_after_it() {
        // New York 2027-03-14: 02:00 EST -> 03:00 EDT; 02:30 does not exist.
        let s = schedule("0 30 2 * * *", "America/New_York");
        let fires = next_fires(&s, at("2027-03-13T12:00:00Z"), 3);
        assert_eq!(shown(&fires)[0], "2027-03-14T03:00:00-04:00", "{fires:?}");
        assert_eq!(shown(&fires)[1], "2027-03-15T02:30:00-04:00", "{fires:?}");
    }
}
