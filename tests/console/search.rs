//! Search from the page header: one match opens its invoice, several make
//! a list, none says so; every text from the source shows as text.

use crate::browser::{self, Browser, OPERATOR, tick};
use crate::common::{self, World};

const SCRIPT: &str = "<script>alert(1)</script>";

#[tokio::test]
async fn a_search_opens_the_one_invoice_it_finds_lists_several_and_says_when_nothing_matched() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 3).await;
    sqlx::query("UPDATE invoices SET number = $1 WHERE id = ANY($2)")
        .bind(SCRIPT)
        .bind(&ids[..2])
        .execute(world.pool())
        .await
        .unwrap();
    tick(&world).await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let title = browser.client.title().await.unwrap();

    let only = ids[2];
    browser
        .fill("form.search input[name=q]", &format!("INV-{only}"))
        .await;
    browser
        .submit("form.search button", &format!("/invoices/{only}"))
        .await;
    assert!(browser.text("h1").await.contains(&only.to_string()));

    browser
        .fill(
            "form.search input[name=q]",
            &format!("customer{only}@EXAMPLE.test"),
        )
        .await;
    browser
        .submit("form.search button", &format!("/invoices/{only}"))
        .await;

    browser.fill("form.search input[name=q]", SCRIPT).await;
    browser.submit("form.search button", "/search").await;
    let numbers = browser.text("table.results").await;
    assert_eq!(numbers.matches(SCRIPT).count(), 2, "{numbers}");

    browser
        .fill("form.search input[name=q]", "<b>nothing</b>")
        .await;
    browser.submit("form.search button", "/search").await;
    assert!(
        browser
            .text("#none")
            .await
            .contains("Nothing matched \"<b>nothing</b>\""),
        "the query shown as text"
    );
    assert!(
        browser.client.get_alert_text().await.is_err(),
        "no alert opened"
    );
    browser.goto(&format!("{}/", console.url)).await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        title,
        "title unchanged"
    );
    browser.close().await;
}
