//! A letter waiting for a connection rides on the end of the message
//! before it: its envelope goes out in the same write as that message's
//! final dot (RFC 2920), and the connection is handed over once the relay
//! answered the dot. Each message still goes out once, and whatever ends
//! the message before it, the rider's envelope delivered nothing.

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, World};

async fn world_for(relay: &Relay) -> World {
    let mut world = World::new().await;
    world.set("smtp.port", relay.port);
    world
}

async fn statuses(world: &World) -> Vec<(String, i64, i32)> {
    sqlx::query_as(
        "SELECT status, count(*), max(attempts) FROM reminders GROUP BY status ORDER BY status",
    )
    .fetch_all(world.pool())
    .await
    .unwrap()
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
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 1)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 20).await;
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
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 1)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 20).await;
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
