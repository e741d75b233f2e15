//! Counters, links and words at their edges: a retry backoff after forty
//! attempts, payment links for invoice numbers `.`, `..` and `../x`, and
//! `explain` saying how far the due date is in plain words.

use chrono::{DateTime, TimeDelta, Utc};
use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, SmtpMode, World, cli, stdout};
use crate::templates::{hrefs, mail_for, start_with};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

#[tokio::test]
async fn a_reminder_that_failed_forty_times_waits_retry_backoff_max_and_explain_says_so() {
    let mut world = World::new().await;
    world
        .set("reminders.retry_backoff", "5m")
        .set("reminders.retry_backoff_max", "6h")
        .set("reminders.max_attempts", 100);
    let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
    world.sink.set_mode(SmtpMode::Refuse4xx);
    tick(&world).await;
    let last_attempt: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE reminders SET attempts = 40, last_attempt_at = now() - interval '1 hour'
          RETURNING last_attempt_at",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    world.sink.set_mode(SmtpMode::Accept);

    tick(&world).await;
    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(
        world.sink.count(),
        0,
        "retried an hour into a 6-hour backoff"
    );
    assert_eq!(common::count_status(world.pool(), "failed").await, 1);
    assert_eq!(e["reason"], "backoff_until", "{e}");
    let until: DateTime<Utc> = e["until"].as_str().unwrap().parse().unwrap();
    assert_eq!(until, last_attempt + TimeDelta::hours(6), "{e}");
}

#[tokio::test]
async fn invoice_numbers_dot_dotdot_and_dotdot_slash_x_never_move_the_payment_link_off_its_path() {
    let mut world = World::new().await;
    world.set(
        "company.payment_url",
        "https://pay.example.test/i/{{ invoice.number }}/pay",
    );
    let mut invoices = Vec::new();
    for number in [".", "..", "../x"] {
        let id = common::insert_invoice(world.pool(), "A", "a@example.test", 10, false).await;
        sqlx::query("UPDATE invoices SET number = $2 WHERE id = $1")
            .bind(id)
            .bind(number)
            .execute(world.pool())
            .await
            .unwrap();
        invoices.push((number, id));
    }

    let (code, stderr) = start_with(&world, &[]).await;

    assert_eq!(code, Some(0), "{stderr}");
    for (number, id) in invoices {
        let mail = mail_for(&world, id);
        let links = hrefs(&mail.html.clone().expect("an HTML part"));
        let shown: Vec<&str> = mail
            .body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Pay online: "))
            .collect();
        for link in links
            .iter()
            .map(String::as_str)
            .chain(shown.iter().copied())
        {
            assert!(
                link.starts_with("https://pay.example.test/i/") && link.ends_with("/pay"),
                "{number}: {link}"
            );
        }
        if number == "../x" {
            assert_eq!(links, ["https://pay.example.test/i/..%2Fx/pay"], "{number}");
            assert_eq!(shown, ["https://pay.example.test/i/..%2Fx/pay"], "{number}");
        } else {
            assert!(
                links.is_empty() && shown.is_empty(),
                "{number}: {links:?} {shown:?}"
            );
            assert!(
                stderr.lines().any(|l| l.contains("WARN")
                    && l.contains("payment_url")
                    && l.contains(&format!("invoice_id={id} "))),
                "no warning naming invoice {id} ({number}): {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn explain_says_due_in_2_days_3_days_overdue_and_when_the_first_step_falls() {
    let world = World::new().await;
    let soon = common::insert_invoice(world.pool(), "A", "a@example.test", -2, false).await;
    let late = common::insert_invoice(world.pool(), "B", "b@example.test", 3, false).await;
    let later = common::insert_invoice(world.pool(), "C", "c@example.test", -10, false).await;
    let explain = |id: i64| {
        let world = &world;
        async move { stdout(&cli(world, &["explain", "--invoice", &id.to_string()]).await) }
    };

    let (soon, late, later) = (
        explain(soon).await,
        explain(late).await,
        explain(later).await,
    );

    assert!(soon.contains(", due in 2 days;"), "{soon}");
    assert!(late.contains(", 3 days overdue;"), "{late}");
    assert!(later.contains(", due in 10 days;"), "{later}");
    assert!(
        later.contains("reason: not_due_until") && later.contains(", in 7 days"),
        "{later}"
    );
    for text in [&soon, &late, &later] {
        assert!(!text.contains("(s)") && !text.contains("-2 day"), "{text}");
    }
}
