//! Signing in, and the overview's numbers against the database's.

use crate::browser::{self, Browser, OPERATOR, make_unknown, tick};
use crate::common::{self, World};

#[tokio::test]
async fn a_wrong_password_is_refused_with_the_form_and_the_right_one_opens_the_overview() {
    let world = World::new().await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.goto(&format!("{}/unknown", console.url)).await;
    assert_eq!(
        browser.path().await,
        "/login",
        "no session: sent to sign in"
    );
    browser
        .sign_in(&console, (OPERATOR.0, "not the password"))
        .await;
    assert_eq!(browser.path().await, "/login");
    assert!(
        browser
            .text("#login-error")
            .await
            .contains("Wrong user name or password")
    );
    browser.screenshot("login-failed").await;
    let status = browser::post_status(
        &format!("{}/login", console.url),
        "username=olga&password=nope",
        None,
    )
    .await;
    assert_eq!(status, 401);
    browser.sign_in(&console, OPERATOR).await;
    assert_eq!(browser.path().await, "/");
    assert_eq!(browser.text("h1").await, "Today");
    browser.close().await;
}

#[tokio::test]
async fn the_overviews_numbers_are_the_databases() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 5).await;
    tick(&world).await;
    make_unknown(&world, ids[0]).await;
    sqlx::query(
        "UPDATE reminders SET status = 'failed', sent_at = NULL WHERE invoice_id = $1::text",
    )
    .bind(ids[1])
    .execute(world.pool())
    .await
    .unwrap();
    sqlx::query("INSERT INTO suppressions (address, reason, source) VALUES ('a@example.test', 'manual', 'cli'), ('b@example.test', 'manual', 'cli')")
        .execute(world.pool())
        .await
        .unwrap();
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let pool = world.pool().clone();
    let one = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let sent_today =
        one("SELECT count(*) FROM reminders WHERE status = 'sent' AND sent_at::date = now()::date")
            .await;
    let unknown =
        one("SELECT count(*) FROM reminders WHERE status = 'sending' AND started_at IS NOT NULL")
            .await;
    let failed = one("SELECT count(*) FROM reminders WHERE status = 'failed'").await;
    let suppressed = one("SELECT count(*) FROM suppressions").await;
    assert_eq!(
        (sent_today, unknown, failed, suppressed),
        (3, 1, 1, 2),
        "the setup"
    );
    assert_eq!(browser.count("sent_today").await, sent_today);
    assert_eq!(browser.count("unknown").await, unknown);
    assert_eq!(browser.count("failed").await, failed);
    assert_eq!(browser.count("suppressed").await, suppressed);
    assert_eq!(browser.count("problems").await, 0);
    browser.close().await;
}

#[tokio::test]
async fn under_a_base_path_every_link_and_redirect_carries_it() {
    let mut world = World::new().await;
    world.set("console.base_path", "/billing");
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser
        .goto(&format!("{}/billing/unknown", console.url))
        .await;
    assert_eq!(browser.path().await, "/billing/login");
    browser
        .sign_in_at(&format!("{}/billing", console.url), OPERATOR)
        .await;
    assert_eq!(browser.path().await, "/billing/");
    browser.click("nav a[href$=\"/suppressions\"]").await;
    browser.wait_for_page("/billing/suppressions").await;
    let styled = browser
        .client
        .execute(
            "return getComputedStyle(document.querySelector('header')).display",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(styled, "flex", "the stylesheet loads under the prefix");
    browser.close().await;
}
