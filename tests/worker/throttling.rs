//! A relay that throttles is up, and the pacer holds its rate: a real
//! Postfix with anvil's limits (messages and connections per client,
//! applied to 127.0.0.1) gets every reminder once, over `run-once` ticks
//! that all exit 0 within their bound, with no attempt used on its
//! refusals, at no less than 0.8x of the most its limits let through and
//! with its refusals ending once the rate is learnt. A 4.7.1 for one
//! recipient is that recipient's: the others are mailed in the same tick.

use std::time::{Duration, Instant};

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::postfix::{Postfix, PostfixOptions};
use crate::common::{self, World, cli};

/// Postfix's anvil limits: messages a client may send per `RATE_UNIT`.
const MESSAGES_PER_UNIT: u32 = 100;
const RATE_UNIT_SECONDS: u32 = 10;
/// The most anvil lets through over time: its windows start at the first
/// message after the last one expired, so no client gets more than
/// `MESSAGES_PER_UNIT` per `RATE_UNIT_SECONDS` on average.
const CEILING: f64 = MESSAGES_PER_UNIT as f64 / RATE_UNIT_SECONDS as f64;

/// What Postfix logs when anvil refuses a message or a connection.
const REFUSALS: [&str; 2] = [
    "Message delivery request rate limit exceeded",
    "Connection rate limit exceeded",
];

#[tokio::test]
async fn a_throttling_postfix_gets_every_reminder_once_at_its_own_rate_over_ticks_that_all_exit_0()
{
    let mut world = World::new().await;
    let postfix = Postfix::start(
        world.sink.port(),
        PostfixOptions {
            message_rate: MESSAGES_PER_UNIT,
            connection_rate: 30,
            rate_unit: Some("10s"),
            ..PostfixOptions::default()
        },
    )
    .await;
    let bound = Duration::from_secs(300);
    world
        .set("smtp.port", postfix.port)
        .set("smtp.pool_size", 4)
        .set("reminders.send_concurrency", 8)
        .set("schedule.max_tick_duration", "5m");
    let total = 600;
    common::insert_overdue(world.pool(), total).await;

    let mut ticks = 0;
    while common::count_status(world.pool(), "sent").await < total && ticks < 6 {
        let started = Instant::now();
        let out = cli(&world, &["run-once"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            started.elapsed() < bound,
            "within the tick's bound: {stderr}"
        );
        ticks += 1;
    }

    let rows: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT status, attempts, count(*) FROM reminders GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [("sent".to_owned(), 1, total)],
        "each sent on its one attempt, none used on a refusal"
    );
    common::wait_until(
        "Postfix relays everything to the sink",
        Duration::from_secs(60),
        || async { world.sink.count() >= total as usize },
    )
    .await;
    assert_eq!(world.sink.count(), total as usize);
    common::assert_no_duplicate_mail(&world.sink);

    // Postfix's own log: when it took each message, and each refusal.
    let accepted = postfix.times_of("message-id=");
    let refused: Vec<u32> = REFUSALS.iter().flat_map(|r| postfix.times_of(r)).collect();
    assert_eq!(accepted.len(), total as usize, "{}", postfix.log());
    let (first, last) = (accepted[0], accepted[accepted.len() - 1]);
    let span = f64::from(last.saturating_sub(first).max(1));
    let rate = total as f64 / span;
    // Learnt by the time half was accepted: what the relay refused after.
    let learnt = accepted[accepted.len() / 2];
    let late = refused.iter().filter(|t| **t > learnt).count();
    let late_minutes = f64::from(last.saturating_sub(learnt)) / 60.0;
    let (pace, measured): (Option<f64>, Option<f64>) =
        sqlx::query_as("SELECT per_second, accepted_per_second FROM relay_pace")
            .fetch_one(world.pool())
            .await
            .unwrap();
    // For the record (BENCHMARKS.md, "The throttled relay").
    eprintln!(
        "ticks {ticks}; accepted {total} in {span} s = {rate:.2}/s against a ceiling of {CEILING}/s ({:.2}x); refusals {} in all, {late} after half was accepted ({late_minutes:.1} min); held {pace:?}/s, measured {measured:?}/s",
        rate / CEILING,
        refused.len()
    );
    assert!(
        rate >= 0.8 * CEILING,
        "the worker's accepted rate {rate:.2}/s is at least 0.8x of the relay's {CEILING}/s"
    );
    assert!(
        (late as f64) <= late_minutes.ceil().max(1.0),
        "at most about one refusal a minute once the rate is learnt: {late} in {late_minutes:.1} min"
    );
    assert!(
        pace.is_some_and(|p| p <= CEILING) && measured.is_some(),
        "the rate paced at and the rate measured are stored for every replica: {pace:?} {measured:?}"
    );
}

#[tokio::test]
async fn one_recipients_4_7_1_from_postfix_fails_that_reminder_alone_and_the_others_go_in_the_same_tick()
 {
    let mut world = World::new().await;
    let postfix = Postfix::start(
        world.sink.port(),
        PostfixOptions {
            defer_domain: Some("slow.example"),
            ..PostfixOptions::default()
        },
    )
    .await;
    world.set("smtp.port", postfix.port);
    let others = 59;
    common::insert_overdue(world.pool(), others).await;
    let slow = common::insert_invoice(world.pool(), "Slow", "ada@slow.example", 10, false).await;

    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let TickOutcome::Done(summary) = outcome else {
        panic!("a recipient's refusal is not the relay throttling: {outcome:?}");
    };
    assert_eq!((summary.counts.sent, summary.counts.failed), (59, 1));
    let (status, attempts): (String, i32) =
        sqlx::query_as("SELECT status, attempts FROM reminders WHERE invoice_id = $1::text")
            .bind(slow)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), attempts), ("failed", 1), "retried later");
    world.wait_for_mails(others as usize).await;
    assert_eq!(world.sink.count(), others as usize);
}

#[tokio::test]
async fn a_policy_refusal_on_mail_is_that_reminders_failure_not_a_throttle_to_wait_out() {
    let relay = crate::common::relay::Relay::start(crate::common::relay::RelayOptions {
        mail_reply: Some((450, "4.7.1 Client host rejected: cannot find your hostname")),
        ..Default::default()
    })
    .await;
    let mut world = World::new().await;
    world.set("smtp.port", relay.port);
    common::insert_overdue(world.pool(), 3).await;

    let outcome = run_tick(&world.context().await, &CancellationToken::new())
        .await
        .unwrap();

    let TickOutcome::Done(summary) = outcome else {
        panic!("the relay is not throttling us: {outcome:?}");
    };
    assert_eq!((summary.counts.sent, summary.counts.failed), (0, 3));
    let rows: Vec<(String, i32, Option<String>)> =
        sqlx::query_as("SELECT status, attempts, last_error FROM reminders")
            .fetch_all(world.pool())
            .await
            .unwrap();
    for (status, attempts, error) in rows {
        assert_eq!(
            (status.as_str(), attempts),
            ("failed", 1),
            "each used an attempt"
        );
        assert!(error.is_some_and(|e| e.contains("Client host rejected")));
    }
}
