//! A relay that throttles is up: a real Postfix with anvil's rate limits
//! (messages and connections per client, applied to 127.0.0.1) gets every
//! reminder once, over ticks that all exit 0, with no attempt used on its
//! refusals, and the pace it accepted is stored for every replica.

use std::time::Duration;

use crate::common::postfix::{Postfix, PostfixOptions};
use crate::common::{self, World, cli};

#[tokio::test]
async fn a_throttling_postfix_gets_every_reminder_once_over_ticks_that_all_exit_0_using_no_attempt_on_its_refusals()
 {
    let mut world = World::new().await;
    let postfix = Postfix::start(
        world.sink.port(),
        PostfixOptions {
            message_rate: 20,
            connection_rate: 6,
            rate_unit: Some("1s"),
            reject_domain: None,
        },
    )
    .await;
    world
        .set("smtp.port", postfix.port)
        .set("smtp.pool_size", 4)
        .set("reminders.send_concurrency", 8);
    let total = 120;
    common::insert_overdue(world.pool(), total).await;

    let mut ticks = 0;
    while common::count_status(world.pool(), "sent").await < total && ticks < 30 {
        let out = cli(&world, &["run-once"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("unreachable"), "{stderr}");
        ticks += 1;
    }

    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT COALESCE(outcome, 'none') FROM job_runs ORDER BY id")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert!(
        outcomes.iter().any(|o| o == "throttled"),
        "the relay did throttle: {outcomes:?}"
    );
    assert!(
        outcomes.iter().all(|o| o == "throttled" || o == "done"),
        "{outcomes:?}"
    );
    let rows: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT status, attempts, count(*) FROM reminders GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [("sent".to_owned(), 1, total)],
        "each sent on its one attempt"
    );
    common::wait_until(
        "Postfix relays everything to the sink",
        Duration::from_secs(30),
        || async { world.sink.count() >= total as usize },
    )
    .await;
    assert_eq!(world.sink.count(), total as usize);
    common::assert_no_duplicate_mail(&world.sink);
    let (pace, accepted): (Option<f64>, Option<f64>) =
        sqlx::query_as("SELECT per_second, accepted_per_second FROM relay_pace")
            .fetch_one(world.pool())
            .await
            .unwrap();
    // For the record: what the relay took against its 20 a second.
    eprintln!(
        "ticks {ticks}, outcomes {outcomes:?}, pace {pace:?}/s, accepted before the last throttle {accepted:?}/s"
    );
    assert!(
        pace.is_some() && accepted.is_some(),
        "the pace and the rate the relay accepted are stored: {pace:?} {accepted:?}"
    );
}
