//! A letter waiting for a connection rides on the end of the message
//! before it: its envelope goes out in the same write as that message's
//! final dot (RFC 2920), and the connection is handed over once the relay
//! answered the dot. Each message still goes out once, and whatever ends
//! the message before it, the rider's envelope delivered nothing.

use std::sync::Arc;
use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, World};
use crate::relays::{statuses, world_for};

/// A world sending over one connection to `relay`, eight letters in
/// flight, with `owed` overdue invoices.
async fn one_connection(relay: &Relay, owed: i64) -> (World, Vec<i64>) {
    let mut world = world_for(relay).await;
    world
        .set("smtp.pool_size", 1)
        .set("reminders.send_concurrency", 8);
    let ids = common::insert_overdue(world.pool(), owed).await;
    (world, ids)
}

/// While letters wait for a connection, the next one's envelope goes out
/// in the same write as the message before it on that connection (RFC 2920
/// lets a group begin with a message's content): one round trip a message
/// instead of two. Each is still sent once.
#[tokio::test]
async fn with_letters_waiting_for_the_connection_the_next_envelope_goes_out_with_the_last_message_s_end()
 {
    let relay = Relay::start(RelayOptions {
        pipelining: true,
        ..RelayOptions::default()
    })
    .await;
    let (world, _) = one_connection(&relay, 20).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!(relay.messages(), 20);
    assert_eq!(statuses(&world).await, vec![("sent".to_owned(), 20, 1)]);
    assert!(
        relay.envelopes_behind_an_end() >= 10,
        "{} of 20 messages had the next envelope behind their end",
        relay.envelopes_behind_an_end()
    );
}

/// The worst moment for a message whose envelope rode on another's end:
/// the relay reads that other message through its final dot and resets
/// the connection. The other stays unknown (never mailed again); the
/// rider's envelope delivered nothing, so it goes out on a fresh
/// connection, once.
#[tokio::test]
async fn a_letter_whose_envelope_rode_on_a_message_the_relay_reset_after_its_end_goes_out_on_a_fresh_connection()
 {
    let relay = Relay::start(RelayOptions {
        pipelining: true,
        reset_after_end: 3,
        ..RelayOptions::default()
    })
    .await;
    let (world, _) = one_connection(&relay, 20).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!(relay.unanswered().len(), 3);
    assert_eq!(relay.messages(), 17);
    assert_eq!(
        statuses(&world).await,
        vec![("sending".to_owned(), 3, 1), ("sent".to_owned(), 17, 1)]
    );
    assert!(
        relay.envelopes_behind_an_end() >= 1,
        "no envelope rode on a message's end"
    );
    let mut ids = relay.message_ids();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 17, "a message went out twice");
}

/// The last moment for a letter whose envelope rode on the message before
/// it is still just before its body: a pause that comes while the relay
/// has not yet answered that message stops it. Its connection, waiting for
/// a body that must not come, is closed; the letter goes back unattempted,
/// and so does any after it.
#[tokio::test]
async fn a_letter_paused_while_its_envelope_rode_on_the_message_before_it_is_not_sent() {
    let replies = Arc::new(tokio::sync::Semaphore::new(0));
    let relay = Relay::start(RelayOptions {
        pipelining: true,
        end_replies: Some(Arc::clone(&replies)),
        ..RelayOptions::default()
    })
    .await;
    let (world, ids) = one_connection(&relay, 3).await;
    let ctx = world.context().await;
    let tick = tokio::spawn(async move { run_tick(&ctx, &CancellationToken::new()).await });

    // A message's end is read with the next envelope behind it, and the
    // relay has not answered it. An end read with nothing behind it (the
    // next letter was not waiting yet) is answered, so that the next one
    // can carry a rider.
    let mut answered = 0;
    common::wait_until(
        "an envelope rode on a message's end",
        Duration::from_secs(20),
        || {
            let ends = relay.ends_read();
            if relay.envelopes_behind_an_end() == 0 && ends > answered {
                replies.add_permits(ends - answered);
                answered = ends;
            }
            std::future::ready(relay.envelopes_behind_an_end() >= 1)
        },
    )
    .await;
    let ended = relay.ends_read();
    for id in &ids {
        sqlx::query(
            "INSERT INTO invoice_reminder.console_pauses (invoice_id, reason, paused_by) \
             VALUES ($1, 'disputed', 'test')",
        )
        .bind(id.to_string())
        .execute(world.pool())
        .await
        .unwrap();
    }
    // Past the time a mark's read of the holds stands for (250 ms), the
    // letter reads them again before its body.
    tokio::time::sleep(Duration::from_millis(400)).await;
    replies.add_permits(10);
    let outcome = tick.await.unwrap().unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert!(ended < 3, "a letter was left to ride");
    assert_eq!(
        relay.messages(),
        ended,
        "only the messages already ended went"
    );
    assert_eq!(
        statuses(&world).await,
        vec![("sent".to_owned(), i64::try_from(ended).unwrap(), 1)],
        "the paused letters went back unattempted"
    );
}
