//! Real relays' habits: a cap on concurrent connections, refusals at RCPT,
//! logins refused, STARTTLS with a private CA.

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

#[tokio::test]
async fn a_relay_that_allows_three_connections_gets_the_whole_backlog_over_three() {
    let relay = Relay::start(RelayOptions {
        max_connections: Some(3),
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 8)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 300).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!(relay.messages(), 300);
    assert!(relay.most_open() <= 3);
    assert!(
        relay.refused_connections() > 0,
        "the pool did try for more than three"
    );
    assert_eq!(statuses(&world).await, vec![("sent".to_owned(), 300, 1)]);
}

#[tokio::test]
async fn a_transient_refusal_at_rcpt_is_retried_later_not_at_once_on_a_fresh_connection() {
    let relay = Relay::start(RelayOptions {
        rcpt_reply: Some((450, "4.2.1 mailbox busy, try later")),
        ..RelayOptions::default()
    })
    .await;
    let world = world_for(&relay).await;
    common::insert_overdue(world.pool(), 10).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(relay.rcpt_commands(), 10, "one RCPT per reminder this tick");
    assert_eq!(statuses(&world).await, vec![("failed".to_owned(), 10, 1)]);
}

#[tokio::test]
async fn a_permanent_refusal_at_rcpt_discards_the_reminder() {
    let relay = Relay::start(RelayOptions {
        rcpt_reply: Some((550, "5.1.1 no such mailbox")),
        ..RelayOptions::default()
    })
    .await;
    let world = world_for(&relay).await;
    common::insert_overdue(world.pool(), 4).await;
    let ctx = world.context().await;

    run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert_eq!(statuses(&world).await, vec![("discarded".to_owned(), 4, 1)]);
    let error: String = sqlx::query_scalar("SELECT last_error FROM reminders LIMIT 1")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert!(error.contains("550"), "{error}");
}

#[tokio::test]
async fn a_refused_login_ends_the_tick_as_a_configuration_error_without_using_attempts() {
    let relay = Relay::start(RelayOptions {
        auth: Some(("billing".into(), "right".into())),
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world
        .set("smtp.username", "billing")
        .set("smtp.password", "wrong");
    common::insert_overdue(world.pool(), 20).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let out = common::cli(&world, &["run-once"]).await;

    assert!(
        matches!(outcome, TickOutcome::SmtpAuthFailed(_)),
        "{outcome:?}"
    );
    assert_eq!(relay.messages(), 0);
    assert_eq!(
        statuses(&world).await,
        vec![],
        "claims handed back, no attempt used"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refused our login"), "{stderr}");
    assert!(!stderr.contains("wrong"), "the password leaked: {stderr}");
}

#[tokio::test]
async fn starttls_with_a_private_ca_works_when_smtp_ca_file_trusts_it_and_only_then() {
    let relay = Relay::start(RelayOptions {
        tls: true,
        ..RelayOptions::default()
    })
    .await;
    let ca_file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ca-{}.pem", uuid::Uuid::new_v4().simple()));
    std::fs::write(&ca_file, &relay.ca_pem).unwrap();
    let mut world = world_for(&relay).await;
    world.set("smtp.tls", "starttls");
    common::insert_overdue(world.pool(), 3).await;

    let untrusted = run_tick(&world.context().await, &CancellationToken::new())
        .await
        .unwrap();
    let sent_untrusted = relay.messages();
    world.set("smtp.ca_file", ca_file.display());
    let trusted = run_tick(&world.context().await, &CancellationToken::new())
        .await
        .unwrap();
    let _ = std::fs::remove_file(&ca_file);

    assert!(
        matches!(untrusted, TickOutcome::SmtpUnavailable(_)),
        "{untrusted:?}"
    );
    assert_eq!(
        sent_untrusted, 0,
        "a certificate nobody vouched for was accepted"
    );
    assert!(matches!(trusted, TickOutcome::Done(_)), "{trusted:?}");
    assert_eq!(relay.messages(), 3);
}
