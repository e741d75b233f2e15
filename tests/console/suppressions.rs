//! The suppression list from the console: an address added is what the
//! tick then leaves out, and one removed is mailed again.

use crate::browser::{self, Browser, OPERATOR};
use crate::common::World;

async fn listed(world: &World) -> Vec<(String, String, String)> {
    sqlx::query_as("SELECT address, reason, source FROM suppressions ORDER BY address")
        .fetch_all(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn an_address_is_added_to_the_suppression_list_and_removed_again() {
    let world = World::new().await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    browser.goto(&format!("{}/suppressions", console.url)).await;
    browser
        .fill("form.suppress input[name=address]", "Bounced@Example.test")
        .await;
    browser
        .fill("form.suppress input[name=reason]", "mailbox closed")
        .await;
    browser.click("form.suppress button").await;
    browser.wait_for("form.unsuppress").await;
    assert_eq!(
        listed(&world).await,
        vec![(
            "Bounced@Example.test".into(),
            "mailbox closed".into(),
            "console".into()
        )]
    );
    assert!(
        browser
            .text("table.suppressions")
            .await
            .contains("Bounced@Example.test")
    );
    browser.screenshot("suppressions").await;

    browser.click("form.unsuppress button").await;
    browser.wait_for("#none").await;
    assert!(listed(&world).await.is_empty());
    assert!(browser.text("#none").await.contains("empty"));

    browser.goto(&format!("{}/activity", console.url)).await;
    let log = browser.text("table.activity").await;
    assert!(
        log.contains("olga suppress Bounced@Example.test mailbox closed"),
        "{log}"
    );
    assert!(
        log.contains("olga unsuppress Bounced@Example.test"),
        "{log}"
    );
    browser.close().await;
}
