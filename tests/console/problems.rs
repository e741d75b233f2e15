//! `/problems`: the source problems `audit` lists, each with the row rule
//! it broke and the hint.

use invoice_reminder::domain::Problem;
use invoice_reminder::problems::rule;

use crate::browser::{self, Browser, VIEWER};
use crate::common::{self, World};

#[tokio::test]
async fn a_row_that_breaks_a_rule_is_listed_with_the_rule_and_the_hint() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 2).await;
    let bad = common::insert_invoice(world.pool(), "Bad", "not an address", 10, false).await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, VIEWER).await;
    assert_eq!(browser.count("problems").await, 1);
    browser.click("a[href=\"/problems\"]").await;
    browser.wait_for_page("/problems").await;
    let row = "tr.problem[data-problem=\"bad_address\"]";
    assert!(
        browser.text(row).await.starts_with(&bad.to_string()),
        "the row names its invoice"
    );
    assert_eq!(
        browser.text(&format!("{row} .rule")).await,
        rule(Problem::BadAddress)
    );
    assert!(
        browser
            .text("#hint")
            .await
            .contains("no reminder until fixed in source.relation")
    );
    let rows = browser
        .client
        .find_all(fantoccini::Locator::Css("tr.problem"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the good rows are not problems");
    browser.screenshot("problems").await;
    browser.close().await;
}
