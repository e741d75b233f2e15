//! `/preview`: every step's sample reminder in every locale, its HTML in a
//! sandboxed frame served with a policy of its own.

use fantoccini::Locator;

use crate::browser::{self, Browser, OPERATOR};
use crate::common::World;

#[tokio::test]
async fn each_step_shows_in_each_locale_with_its_html_in_a_sandboxed_frame() {
    let world = World::new().await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    browser.goto(&format!("{}/preview", console.url)).await;
    browser.wait_for("section.preview").await;
    let settings = world.settings();
    let steps = settings.reminders.stages.steps().len();
    let sections = browser
        .client
        .find_all(Locator::Css("section.preview"))
        .await
        .unwrap();
    assert_eq!(sections.len(), steps * 2, "every step in en and de");
    let text = browser
        .text("section.preview[data-step=\"overdue\"][data-locale=\"en\"] pre.text")
        .await;
    assert!(text.contains("INV-0001"), "the sample invoice: {text}");
    let frame = "section.preview[data-step=\"overdue\"][data-locale=\"de\"] iframe";
    let sandbox = browser
        .client
        .find(Locator::Css(frame))
        .await
        .unwrap()
        .attr("sandbox")
        .await
        .unwrap();
    assert_eq!(sandbox.as_deref(), Some(""), "sandboxed, nothing allowed");
    browser.screenshot("preview").await;

    // The frame loads: its document is the mail's HTML part.
    let element = browser.client.find(Locator::Css(frame)).await.unwrap();
    element.enter_frame().await.unwrap();
    let body = browser.text("body").await;
    assert!(body.contains("INV-0001"), "{body}");
    browser.client.clone().enter_parent_frame().await.unwrap();

    // Its own policy: a sandbox, nothing but the mail's inline styles.
    let cookie = browser.client.get_named_cookie("ir_console").await.unwrap();
    let (status, csp) = browser::get_header(
        &format!("{}/preview/frame?step=overdue&locale=en", console.url),
        &format!("ir_console={}", cookie.value()),
        "content-security-policy",
    )
    .await;
    assert_eq!(status, 200);
    assert!(csp.starts_with("sandbox;"), "{csp}");
    assert!(!csp.contains("script"), "{csp}");
    assert!(csp.contains("frame-ancestors 'self'"), "{csp}");
    browser.close().await;
}
