//! The pacer on tokio's paused clock: halts and probes, the rate learnt
//! between throttles and held, stops and the give-up bound, and the way
//! back to no limit.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::*;
use crate::domain::LearnedRate;

fn never() -> std::future::Pending<()> {
    std::future::pending()
}

#[tokio::test(start_paused = true)]
async fn a_throttle_pauses_every_send_until_a_probe_is_accepted() {
    let pacer = Pacer::new(None);
    let slot = pacer.ready(&mut never()).await.unwrap();
    assert_eq!(slot, Slot::Open);
    assert!(pacer.throttled(slot), "the throttle starts a halt");
    assert!(pacer.halted());
    let started = Instant::now();
    let probe = pacer.ready(&mut never()).await.unwrap();
    assert_eq!(probe, Slot::Probe);
    assert_eq!(started.elapsed(), FIRST_GAP);
    // While the probe is out, nobody else goes.
    let waiting = tokio::time::timeout(Duration::from_secs(60), pacer.ready(&mut never())).await;
    assert!(
        waiting.is_err(),
        "a second send waits for the probe's answer"
    );
    pacer.throttled(probe);
    let again = Instant::now();
    let probe = pacer.ready(&mut never()).await.unwrap();
    assert_eq!(probe, Slot::Probe);
    assert_eq!(again.elapsed(), FIRST_GAP.mul_f64(GAP_GROWTH));
    pacer.accepted(probe);
    assert!(!pacer.halted());
    assert_eq!(pacer.ready(&mut never()).await.unwrap(), Slot::Open);
    let seen = pacer.take_seen();
    assert_eq!((seen.accepted, seen.refused, seen.halts), (1, 2, 1));
}

/// Probes until the relay's window reopens at `reopens`: the accepted
/// probe's answer (a rate learnt, if any).
async fn probe_until(pacer: &Pacer, reopens: Instant) -> Option<f64> {
    loop {
        let slot = pacer.ready(&mut never()).await.unwrap();
        assert_eq!(slot, Slot::Probe);
        if Instant::now() >= reopens {
            return pacer.accepted(slot);
        }
        pacer.throttled(slot);
    }
}

#[tokio::test(start_paused = true)]
async fn the_rate_accepted_from_one_pause_to_the_next_is_learnt_and_held_evenly() {
    // A relay that takes 100 messages a window of 10 s, the window
    // starting with the first message after the last one closed.
    let pacer = Pacer::new(None);
    let first = pacer.ready(&mut never()).await.unwrap();
    assert!(pacer.throttled(first));
    let window = Duration::from_secs(10);
    assert_eq!(probe_until(&pacer, Instant::now() + window).await, None);
    let opened = Instant::now();
    for _ in 0..99 {
        let slot = pacer.ready(&mut never()).await.unwrap();
        assert_eq!(pacer.accepted(slot), None);
    }
    let slot = pacer.ready(&mut never()).await.unwrap();
    assert!(pacer.throttled(slot));
    let rate = probe_until(&pacer, opened + window)
        .await
        .expect("a rate is learnt as the second halt ends");
    let expected = 100.0 / 10.0 * SHARE;
    assert!((rate - expected).abs() < 0.5, "{rate} against {expected}");
    assert_eq!(pacer.per_second(), Some(rate));
    // Held evenly: 20 more take 20 periods, none of them in a burst.
    let started = Instant::now();
    for _ in 0..20 {
        let slot = pacer.ready(&mut never()).await.unwrap();
        pacer.accepted(slot);
    }
    let took = started.elapsed().as_secs_f64();
    assert!((took - 20.0 / rate).abs() < 1.5 / rate, "{took}");
}

#[tokio::test(start_paused = true)]
async fn a_stop_wakes_a_send_waiting_for_its_slot() {
    let pacer = Pacer::new(Some(1));
    assert_eq!(pacer.ready(&mut never()).await, Ok(Slot::Open));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut stopped = Box::pin(async move {
        let _ = rx.await;
    });
    let waiting = pacer.ready(&mut stopped);
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err()
    );
    let _ = tx.send(());
    assert_eq!(waiting.await, Err(NotReady::Stopped));
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_outlasts_the_bound_gives_up() {
    let pacer = Pacer::new(None);
    let slot = pacer.ready(&mut never()).await.unwrap();
    pacer.throttled(slot);
    pacer.bound_halts(Duration::from_secs(5));
    pacer.tick_started(Instant::now());
    let started = Instant::now();
    loop {
        match pacer.ready(&mut never()).await {
            Ok(probe) => {
                pacer.throttled(probe);
            }
            Err(e) => {
                assert_eq!(e, NotReady::GaveUp);
                break;
            }
        }
    }
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    pacer.ended();
    assert_eq!(pacer.ready(&mut never()).await, Ok(Slot::Open));
}

#[tokio::test(start_paused = true)]
async fn quiet_stretches_raise_the_rate_and_then_drop_the_limit() {
    let pacer = Pacer::new(None);
    pacer.restore(LearnedRate {
        per_second: Some(10.0),
        measured: Some(10.3),
        raises: 0,
        quiet_for: QUIET,
    });
    let slot = pacer.ready(&mut never()).await.unwrap();
    pacer.accepted(slot);
    let raised = pacer.per_second().unwrap();
    assert!((raised - 10.0 * RAISE).abs() < 1e-9, "{raised}");
    for _ in 1..FREE_AFTER {
        advance(QUIET).await;
        let slot = pacer.ready(&mut never()).await.unwrap();
        pacer.accepted(slot);
    }
    assert_eq!(pacer.per_second(), None, "the relay stopped throttling");
    assert_eq!(pacer.learned().raises, 0);
}

#[tokio::test(start_paused = true)]
async fn the_configured_rate_caps_the_learnt_one() {
    let pacer = Pacer::new(Some(2));
    pacer.restore(LearnedRate {
        per_second: Some(50.0),
        ..LearnedRate::default()
    });
    assert_eq!(pacer.per_second(), Some(2.0));
    let started = Instant::now();
    for _ in 0..5 {
        pacer.ready(&mut never()).await.unwrap();
    }
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_message_on_its_way_when_the_pause_began_does_not_end_it() {
    let pacer = Pacer::new(None);
    let on_its_way = pacer.ready(&mut never()).await.unwrap();
    let refused = pacer.ready(&mut never()).await.unwrap();
    assert!(pacer.throttled(refused));
    assert_eq!(pacer.accepted(on_its_way), None);
    assert!(pacer.halted(), "only a probe ends a halt");
    pacer.answered(Slot::Open);
    assert!(pacer.halted());
}
