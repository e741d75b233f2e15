//! A payment signal's hold in the console: the invoice page shows who holds
//! it and since when, the overview counts it, the next tick leaves the
//! invoice alone, and an operator lifts it only with a reason and the
//! confirmation, recorded in the activity log; then the tick mails it.

use chrono::Utc;
use invoice_reminder::domain::{InvoiceId, PaymentSignal, Signal};

use crate::browser::{self, Browser, OPERATOR, tick};
use crate::common::{self, World};

#[tokio::test]
async fn a_held_invoice_is_shown_counted_and_left_alone_until_an_operator_lifts_the_hold() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    let (held, other) = (ids[0], ids[1]);
    let signal = PaymentSignal {
        provider: "stripe",
        event_id: "evt_console".into(),
        signal: Some(Signal::Disputed),
        invoice_id: Some(InvoiceId::from(held.to_string().as_str())),
        object_id: "dp_1".into(),
        refs: vec!["dp_1".into()],
        links: Vec::new(),
        at: Utc::now(),
    };
    invoice_reminder::db::payments::record(
        &world.database(),
        &signal,
        std::time::Duration::from_secs(3600),
    )
    .await
    .unwrap();
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    assert_eq!(browser.count("held").await, 1, "the overview counts it");

    let page = format!("/invoices/{held}");
    browser.goto(&format!("{}{page}", console.url)).await;
    assert_eq!(
        browser.text("section.explain .reason").await,
        "held_by_payment_signal"
    );
    let shown = browser.text("#hold").await;
    assert!(
        shown.contains("stripe event evt_console (disputed)"),
        "{shown}"
    );
    tick(&world).await;
    let mailed: Vec<i64> = world
        .sink
        .received()
        .iter()
        .filter_map(|m| m.invoice_id())
        .collect();
    assert_eq!(mailed, vec![other], "the held invoice is not mailed");

    // Without the confirmation nothing changes.
    browser
        .fill("form.lift input[name=reason]", "dispute withdrawn by phone")
        .await;
    browser
        .submit("form.lift button", &format!("{page}/lift"))
        .await;
    assert!(
        browser
            .text("#notice")
            .await
            .contains("Nothing was changed")
    );
    browser.goto(&format!("{}{page}", console.url)).await;
    browser
        .fill("form.lift input[name=reason]", "dispute withdrawn by phone")
        .await;
    browser.click("form.lift input[name=confirm]").await;
    browser.submit("form.lift button", &page).await;
    assert_eq!(
        browser.text("section.explain .reason").await,
        "will_send_today"
    );
    tick(&world).await;
    let mailed: Vec<i64> = world
        .sink
        .received()
        .iter()
        .filter_map(|m| m.invoice_id())
        .collect();
    assert_eq!(mailed, vec![other, held], "mailed once the hold is lifted");

    browser.goto(&format!("{}/activity", console.url)).await;
    let log = browser.text("table.activity").await;
    assert!(
        log.contains(&format!(
            "olga lift hold invoice {held} dispute withdrawn by phone"
        )),
        "{log}"
    );
    browser.close().await;
}
