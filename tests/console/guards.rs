//! What must change nothing: a POST without the session's token, any
//! POST of a viewer, and a billing text that carries a script.

use crate::browser::{self, Browser, OPERATOR, VIEWER, make_unknown, status_of, tick};
use crate::common::{self, World};

const SCRIPT: &str = "<script>alert(1)</script>";

#[tokio::test]
async fn a_post_without_the_token_and_a_viewers_post_change_nothing() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    tick(&world).await;
    let (row, message_id) = make_unknown(&world, ids[0]).await;
    let console = browser::start(&world).await;

    let operator = Browser::open().await;
    operator.sign_in(&console, OPERATOR).await;
    operator.goto(&format!("{}/unknown", console.url)).await;
    operator
        .client
        .execute(
            "document.querySelector('form.settle input[name=csrf]').remove()",
            vec![],
        )
        .await
        .unwrap();
    operator
        .submit("form.settle button[value=sent]", "/unknown/settle")
        .await;
    assert!(operator.text("main").await.contains("security token"));
    assert_eq!(
        status_of(&world, row).await,
        "sending",
        "no token: unchanged"
    );
    operator.close().await;

    let viewer = Browser::open().await;
    viewer.sign_in(&console, VIEWER).await;
    assert!(viewer.text("#read-only").await.contains("viewer"));
    viewer.goto(&format!("{}/unknown", console.url)).await;
    assert!(
        viewer
            .client
            .find(fantoccini::Locator::Css("form.settle"))
            .await
            .is_err(),
        "no form for a viewer"
    );
    viewer.screenshot("viewer").await;
    // The viewer posts the operator's form by hand, with its own valid token.
    let post = format!(
        "const f = document.createElement('form'); f.method = 'post'; f.action = '/unknown/settle';
         for (const [k, v] of [['message_id', {message_id:?}], ['action', 'sent'],
              ['csrf', document.querySelector('input[name=csrf]').value]]) {{
           const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }}
         document.body.appendChild(f); f.submit();"
    );
    viewer.client.execute(&post, vec![]).await.unwrap();
    viewer.wait_for_page("/unknown/settle").await;
    assert!(viewer.text("main").await.contains("Your role is viewer"));
    assert_eq!(
        status_of(&world, row).await,
        "sending",
        "a viewer: unchanged"
    );
    let cookie = format!(
        "ir_console={}",
        viewer
            .client
            .get_named_cookie("ir_console")
            .await
            .unwrap()
            .value()
    );
    let status = browser::post_status(
        &format!("{}/unknown/settle", console.url),
        &format!("message_id={message_id}&action=sent"),
        Some(&cookie),
    )
    .await;
    assert_eq!(status, 403);
    viewer.close().await;
}

#[tokio::test]
async fn a_script_in_a_text_shows_as_text_and_never_runs() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    tick(&world).await;
    let (_, message_id) = make_unknown(&world, ids[0]).await;
    sqlx::query("UPDATE reminders SET last_error = $1")
        .bind(SCRIPT)
        .execute(world.pool())
        .await
        .unwrap();
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    browser.goto(&format!("{}/unknown", console.url)).await;
    assert!(browser.text("main").await.contains(SCRIPT), "shown as text");
    browser
        .fill(
            &format!("form.settle:has(input[value=\"{message_id}\"]) input[name=reason]"),
            SCRIPT,
        )
        .await;
    browser
        .submit("form.settle button[value=sent]", "/unknown/settle")
        .await;
    browser.goto(&format!("{}/activity", console.url)).await;
    assert!(browser.text("table.activity").await.contains(SCRIPT));
    assert!(
        browser.client.get_alert_text().await.is_err(),
        "no alert opened"
    );
    browser.close().await;
}
