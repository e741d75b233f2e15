//! The overview after a real tick: owed today by step, the counts, the
//! next tick and the lock's holder, each equal to what `audit`, `status`
//! and `next` say; and the last 30 days' chart.

use fantoccini::Locator;
use serde_json::Value;

use crate::browser::{self, Browser, OPERATOR, make_unknown, tick};
use crate::common::{self, World};

async fn json(world: &World, args: &[&str]) -> Value {
    let out = common::cli(world, args).await;
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The text of `css` in the page, hidden or not (a closed `<details>`,
/// an SVG `<desc>`).
async fn content(browser: &Browser, css: &str) -> String {
    browser.wait_for(css).await;
    browser
        .client
        .execute(
            "return document.querySelector(arguments[0]).textContent",
            vec![Value::from(css)],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn after_a_tick_the_overview_says_what_audit_status_and_next_say() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 4).await;
    tick(&world).await;
    make_unknown(&world, ids[0]).await;
    // Owed today and not claimed yet: two due 10 days ago, one 1 day ago.
    for (name, days) in [("a", 10), ("b", 10), ("c", 1)] {
        common::insert_invoice(
            world.pool(),
            name,
            &format!("{name}@example.test"),
            days,
            false,
        )
        .await;
    }
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;

    let audit = json(&world, &["audit", "--json"]).await;
    assert_eq!(audit["missing_count"], 3, "the setup: {audit}");
    assert_eq!(browser.count("owed_new").await, 3);
    let mut by_step = std::collections::BTreeMap::new();
    for m in audit["missing"].as_array().unwrap() {
        *by_step
            .entry(m["step"].as_str().unwrap().to_owned())
            .or_insert(0i64) += 1;
    }
    assert_eq!(by_step.len(), 2, "two steps owed: {by_step:?}");
    for (step, n) in &by_step {
        let shown = browser.text(&format!("[data-owed-step=\"{step}\"]")).await;
        assert_eq!(shown.trim().parse::<i64>().unwrap(), *n, "step {step}");
    }
    assert_eq!(
        browser.count("unknown").await,
        audit["unknown"].as_array().unwrap().len() as i64
    );
    assert_eq!(browser.count("unknown").await, 1);
    assert_eq!(browser.count("sent_today").await, 3);
    assert_eq!(
        browser.count("failed").await,
        audit["counts"]["failed"].as_i64().unwrap_or(0)
    );
    assert_eq!(
        browser.count("problems").await,
        audit["source_problems_count"].as_i64().unwrap()
    );

    let status = json(&world, &["status", "--json"]).await;
    assert!(status["holder"].is_null(), "nobody holds it: {status}");
    assert_eq!(browser.text("#lock-holder").await, "nobody");
    let next = json(&world, &["next", "--json", "--count", "1"]).await;
    let fire = chrono::DateTime::parse_from_rfc3339(next[0]["local"].as_str().unwrap()).unwrap();
    let shown = browser.text("#next-tick").await;
    assert_eq!(
        shown,
        fire.with_timezone(&world.settings().schedule.timezone)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    );

    // Today's bar: 3 sent and 1 sending, claimed by the tick.
    let sent_bars = browser
        .client
        .find_all(Locator::Css("svg[role=img] rect.bar-sent"))
        .await
        .unwrap();
    assert_eq!(sent_bars.len(), 1, "one day with sent reminders");
    let today_row = content(&browser, "#chart-table tr:nth-child(2)").await;
    assert!(today_row.contains("3"), "{today_row}");
    let desc = content(&browser, "svg desc").await;
    assert!(desc.starts_with("4 reminders in 30 days"), "{desc}");
    browser.screenshot("overview").await;

    // A replica takes the lock: the overview names it held.
    let ctx = world.context().await;
    let lease = ctx
        .lock
        .try_acquire(common::fence_floor(&world).await)
        .await;
    assert!(
        matches!(lease, Ok(invoice_reminder::lock::Acquisition::Acquired(_))),
        "the lock is free"
    );
    browser.goto(&format!("{}/", console.url)).await;
    let held = browser.text("#lock-holder").await;
    assert_ne!(held, "nobody");
    browser.close().await;
}

/// The overview counts by step from the survey's listing when it holds
/// every owed row, and asks `owed_by_step` when it does not: both count
/// the same rows.
#[tokio::test]
async fn owed_by_step_counts_the_rows_the_listing_counts() {
    use invoice_reminder::db::owed::{owed_by_step, owed_listing};
    use invoice_reminder::db::owing::OwingDay;
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 3).await;
    tick(&world).await;
    sqlx::query(
        "UPDATE reminders SET status = 'failed', sent_at = NULL WHERE invoice_id = $1::text",
    )
    .bind(ids[0])
    .execute(world.pool())
    .await
    .unwrap();
    for (name, days) in [("a", 10), ("b", 10), ("c", 1), ("d", 30)] {
        common::insert_invoice(
            world.pool(),
            name,
            &format!("{name}@example.test"),
            days,
            false,
        )
        .await;
    }
    let settings = world.settings();
    let db = world.database();
    let (now, today) = invoice_reminder::db::clock(&db, settings.schedule.timezone)
        .await
        .unwrap();
    let owing = OwingDay::from_settings(&settings, now, today);
    let max_attempts = settings.reminders.max_attempts;
    let steps = owed_by_step(&db, &owing, max_attempts).await.unwrap();
    let listing = owed_listing(&db, &owing, max_attempts, 1).await.unwrap();
    let counted: Vec<(String, i64, i64)> = steps
        .iter()
        .map(|s| (s.step.to_string(), s.new, s.retries))
        .collect();
    assert_eq!(
        counted,
        [
            ("final".to_owned(), 1, 0),
            ("overdue".to_owned(), 2, 1),
            ("upcoming".to_owned(), 1, 0)
        ]
    );
    assert_eq!(steps.iter().map(|s| s.new).sum::<i64>(), listing.total_new);
    assert_eq!(
        steps.iter().map(|s| s.new + s.retries).sum::<i64>(),
        listing.total
    );
}
