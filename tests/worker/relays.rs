//! Real relays' habits: a cap on concurrent connections, refusals at RCPT,
//! logins refused, STARTTLS with a private CA.

use std::collections::HashSet;
use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, TemplateDir, World, cli};

pub(crate) async fn world_for(relay: &Relay) -> World {
    let mut world = World::new().await;
    world.set("smtp.port", relay.port);
    world
}

/// Reminders by status: (status, count, most attempts).
pub(crate) async fn statuses(world: &World) -> Vec<(String, i64, i32)> {
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
async fn a_relay_that_refuses_extra_connections_before_the_others_greet_gets_the_whole_backlog_without_using_attempts()
 {
    let relay = Relay::start(RelayOptions {
        max_connections: Some(3),
        hold_greeting: Some(Duration::from_secs(5)),
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 8)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 300).await;

    let mut after_each_tick = Vec::new();
    for _ in 0..3 {
        // A context per tick, as each `run-once` is a process of its own.
        let ctx = world.context().await;
        run_tick(&ctx, &CancellationToken::new()).await.unwrap();
        ctx.mailer.shutdown().await;
        after_each_tick.push(statuses(&world).await);
    }

    assert!(
        relay.refused_connections() > 0,
        "the pool did try for more than three"
    );
    for (tick, statuses) in after_each_tick.iter().enumerate() {
        assert_eq!(
            statuses,
            &vec![("sent".to_owned(), 300, 1)],
            "after tick {}: a refused connection failed a reminder or used an attempt",
            tick + 1
        );
    }
    let ids = relay.message_ids();
    assert_eq!(ids.len(), 300);
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        300,
        "mailed twice"
    );
    assert!(relay.most_open() <= 3);
}

#[tokio::test]
async fn a_relay_whose_accepted_connections_fail_too_is_down_and_no_attempt_is_used() {
    let relay = Relay::start(RelayOptions {
        max_connections: Some(3),
        hold_greeting: Some(Duration::from_secs(5)),
        greeting: Some("421 4.3.2 Service not available"),
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 8)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 50).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(
        matches!(outcome, TickOutcome::SmtpUnavailable(_)),
        "{outcome:?}"
    );
    assert_eq!(relay.messages(), 0);
    let used: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders WHERE attempts > 0")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(used, 0, "an unreachable relay used attempts");
}

#[tokio::test]
async fn the_pool_grows_back_on_the_next_tick_after_a_relay_made_it_use_fewer() {
    let relay = Relay::start(RelayOptions {
        max_connections: Some(3),
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world
        .set("smtp.pool_size", 8)
        .set("reminders.send_concurrency", 8);
    common::insert_overdue(world.pool(), 100).await;
    // One context for both ticks: the pool lives in its mailer.
    let ctx = world.context().await;
    let first = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    assert!(matches!(first, TickOutcome::Done(_)), "{first:?}");
    assert!(relay.refused_connections() > 0, "the pool never shrank");
    assert!(relay.most_open() <= 3);

    relay.set_max_connections(8);
    common::insert_overdue(world.pool(), 100).await;
    let second = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(second, TickOutcome::Done(_)), "{second:?}");
    assert_eq!(relay.messages(), 200);
    assert!(
        relay.most_open() > 3,
        "the pool stayed at {} connections after the relay allowed 8",
        relay.most_open()
    );
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

#[tokio::test]
async fn with_a_relay_that_offers_pipelining_the_envelope_goes_out_in_one_write_and_only_then() {
    let pipelining = Relay::start(RelayOptions {
        pipelining: true,
        ..RelayOptions::default()
    })
    .await;
    let stepwise = Relay::start(RelayOptions::default()).await;
    for relay in [&pipelining, &stepwise] {
        let world = world_for(relay).await;
        common::insert_overdue(world.pool(), 20).await;
        let ctx = world.context().await;
        let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
        assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
        assert_eq!(relay.messages(), 20);
    }
    // MAIL, RCPT and DATA in one write: RCPT and DATA arrive behind MAIL.
    assert!(
        pipelining.pipelined_commands() >= 2 * 20,
        "{} commands pipelined",
        pipelining.pipelined_commands()
    );
    assert_eq!(
        stepwise.pipelined_commands(),
        0,
        "a relay that does not offer PIPELINING gets one command at a time"
    );
}

#[tokio::test]
async fn a_refused_rcpt_in_a_pipelined_envelope_delivers_nothing_and_is_retried_later() {
    let relay = Relay::start(RelayOptions {
        pipelining: true,
        rcpt_reply: Some((450, "4.2.1 mailbox busy")),
        ..RelayOptions::default()
    })
    .await;
    let world = world_for(&relay).await;
    common::insert_overdue(world.pool(), 5).await;
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!(relay.messages(), 0);
    assert_eq!(statuses(&world).await, vec![("failed".to_owned(), 5, 1)]);
    assert!(relay.pipelined_commands() > 0);
}

/// A relay that reads a reminder through its final dot and then resets the
/// connection without a reply may have queued it: the row stays unknown,
/// `audit` lists it with the Message-ID the relay read, and no later tick
/// mails it again (RFC 5321: after the final dot only the relay's reply
/// says "not taken").
#[tokio::test]
async fn a_relay_that_resets_after_the_final_dot_leaves_the_reminder_unknown_and_it_is_never_mailed_again()
 {
    let relay = Relay::start(RelayOptions {
        reset_after_end: 1,
        ..RelayOptions::default()
    })
    .await;
    let mut world = world_for(&relay).await;
    world.set("reminders.send_concurrency", 1);
    common::insert_overdue(world.pool(), 1).await;

    for _ in 0..2 {
        let ctx = world.context().await;
        let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
        ctx.mailer.shutdown().await;
        assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    }

    let unanswered = relay.unanswered();
    assert_eq!(
        (unanswered.len(), relay.messages()),
        (1, 0),
        "read once, never again"
    );
    assert_eq!(statuses(&world).await, vec![("sending".to_owned(), 1, 1)]);
    let audit = cli(&world, &["audit", "--json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let unknown = report["unknown"].as_array().cloned().unwrap_or_default();
    assert_eq!(unknown.len(), 1, "{report}");
    let message_id = unknown[0]["message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !message_id.is_empty() && unanswered[0].contains(message_id.trim_matches(['<', '>'])),
        "audit names the Message-ID the relay read: {message_id}"
    );
}

/// A relay that drops the connection while the client is still writing a
/// reminder's data (a message larger than the sockets' buffers) never had
/// its end: no attempt is used, and the next tick mails it once.
#[tokio::test]
async fn a_connection_broken_while_the_data_is_still_being_written_costs_no_attempt_and_the_next_tick_mails_it_once()
 {
    let relay = Relay::start(RelayOptions {
        cut_messages: 1,
        ..RelayOptions::default()
    })
    .await;
    // Four megabytes of text: more than the sockets' buffers take at once.
    let body = format!("{}\n", "Please pay this invoice. ".repeat(40)).repeat(4_000);
    let dir = TemplateDir::new(&[
        ("en/overdue.subject.j2", "Payment reminder\n"),
        ("en/overdue.txt.j2", &body),
    ]);
    let mut world = world_for(&relay).await;
    // Rendering megabytes takes a debug build a while: a lease to match.
    world
        .set("reminders.send_concurrency", 1)
        .set("templates.dir", dir.path.display())
        .set("lock.ttl", "30s")
        .set("lock.renew_every", "5s");
    common::insert_overdue(world.pool(), 1).await;

    let ctx = world.context().await;
    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    ctx.mailer.shutdown().await;

    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!((relay.cut_messages(), relay.messages()), (1, 0));
    assert_eq!(
        statuses(&world).await,
        vec![("failed".to_owned(), 1, 0)],
        "not unknown, and no attempt used: the relay never had the message's end"
    );

    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    ctx.mailer.shutdown().await;

    assert_eq!(relay.messages(), 1, "mailed once");
    assert_eq!(statuses(&world).await, vec![("sent".to_owned(), 1, 1)]);
}

/// A relay that is down (nothing listens on its port) when the tick's first
/// mail goes out: nothing was sent, so every row goes back with no attempt
/// used and none is left started, in both modes.
#[tokio::test]
async fn a_relay_down_at_the_first_send_leaves_every_row_unattempted_in_both_modes() {
    for group_by in ["invoice", "customer"] {
        let closed = common::closed_port::ClosedPort::new();
        let mut world = World::new().await;
        world
            .set("smtp.port", closed.port)
            .set("reminders.group_by", group_by);
        common::insert_overdue(world.pool(), 20).await;
        let ctx = world.context().await;

        let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

        assert!(
            matches!(outcome, TickOutcome::SmtpUnavailable(_)),
            "{group_by}: {outcome:?}"
        );
        let touched: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM reminders
              WHERE attempts > 0 OR status IN ('sent', 'sending')",
        )
        .fetch_one(world.pool())
        .await
        .unwrap();
        assert_eq!(
            touched,
            0,
            "{group_by}: a relay that was down used an attempt or left a row started: {:?}",
            statuses(&world).await
        );
    }
}
