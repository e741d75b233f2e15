//! Settling unknown deliveries from the console: "sent" closes the row;
//! "resend" hands it back, and the next tick mails it once, with the same
//! Message-ID; both are in the activity log.

use crate::browser::{self, Browser, OPERATOR, make_unknown, status_of, tick};
use crate::common::{self, World};

/// The settle form of the mail with `message_id`.
fn form(message_id: &str) -> String {
    format!("form.settle:has(input[name=message_id][value=\"{message_id}\"])")
}

#[tokio::test]
async fn a_mail_settled_as_sent_is_closed_and_one_resent_goes_out_once_more_with_its_message_id() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    tick(&world).await;
    let (went_out, went_out_id) = make_unknown(&world, ids[0]).await;
    let (lost, lost_id) = make_unknown(&world, ids[1]).await;
    let mails_before = world.sink.count();
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    browser.goto(&format!("{}/unknown", console.url)).await;
    browser.screenshot("unknown").await;

    browser
        .fill(
            &format!("{} input[name=reason]", form(&went_out_id)),
            "in the relay's log",
        )
        .await;
    browser
        .submit(
            &format!("{} button[value=sent]", form(&went_out_id)),
            "/unknown/settle",
        )
        .await;
    assert_eq!(browser.text("h1").await, "Settled");
    assert_eq!(status_of(&world, went_out).await, "sent");
    assert_eq!(
        status_of(&world, lost).await,
        "sending",
        "the other mail is untouched"
    );

    browser.goto(&format!("{}/unknown", console.url)).await;
    browser
        .submit(
            &format!("{} button[value=resend]", form(&lost_id)),
            "/unknown/settle",
        )
        .await;
    assert_eq!(
        browser.text("h1").await,
        "Not done",
        "resend needs the box ticked"
    );
    assert_eq!(status_of(&world, lost).await, "sending");
    browser.goto(&format!("{}/unknown", console.url)).await;
    browser
        .click(&format!("{} input[name=confirm]", form(&lost_id)))
        .await;
    browser
        .submit(
            &format!("{} button[value=resend]", form(&lost_id)),
            "/unknown/settle",
        )
        .await;
    assert_eq!(browser.text("h1").await, "Settled");
    assert_eq!(status_of(&world, lost).await, "failed");

    tick(&world).await;
    tick(&world).await;
    assert_eq!(status_of(&world, lost).await, "sent");
    let mails = world.sink.received();
    assert_eq!(mails.len(), mails_before + 1, "mailed once more");
    let resent = mails
        .last()
        .unwrap()
        .header("Message-ID")
        .unwrap_or_default();
    assert_eq!(resent.trim(), format!("<{lost_id}>"));

    browser.goto(&format!("{}/activity", console.url)).await;
    let log = browser.text("table.activity").await;
    assert!(
        log.contains(&format!(
            "olga settle sent Message-ID <{went_out_id}> in the relay's log {went_out}"
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!("olga resend Message-ID <{lost_id}>")),
        "{log}"
    );
    browser.screenshot("activity").await;
    browser.close().await;
}
