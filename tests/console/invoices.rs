//! The invoice page: the `explain` answer, the reminder history with the
//! Message-ID actually sent, the archived message (hash, sandboxed HTML,
//! `.eml` download); pause and unpause from it, which the next tick obeys.

use http_body_util::BodyExt as _;
use invoice_reminder::domain::InvoiceId;
use invoice_reminder::operator::explain::explain_invoice;
use sha2::Digest as _;

use crate::browser::{self, Browser, OPERATOR, VIEWER, tick};
use crate::common::{self, World};

const SCRIPT: &str = "<script>alert(1)</script>";

/// The status, headers and body of a GET of `url` with `cookie`, outside
/// the browser (WebDriver shows neither status nor headers).
pub async fn get(url: &str, cookie: &str) -> (u16, hyper::HeaderMap, Vec<u8>) {
    use http_body_util::Empty;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<hyper::body::Bytes>>();
    let request = hyper::Request::get(url)
        .header("cookie", cookie)
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

/// The session cookie of `browser`, as a `cookie` header.
pub async fn cookie(browser: &Browser) -> String {
    format!(
        "ir_console={}",
        browser
            .client
            .get_named_cookie("ir_console")
            .await
            .unwrap()
            .value()
    )
}

/// What `explain` (the command's code) says about `invoice` today.
async fn explained_reason(world: &World, invoice: i64) -> (String, String) {
    let settings = world.settings();
    let db = invoice_reminder::db::Db::new(world.pool().clone(), &settings);
    let desk = invoice_reminder::operator::desk::Desk::new(db, std::sync::Arc::new(settings));
    let e = explain_invoice(&desk, &InvoiceId::from(invoice.to_string().as_str()))
        .await
        .unwrap();
    (e.reason.label().to_owned(), e.reason_detail)
}

#[tokio::test]
async fn a_paused_invoice_is_not_mailed_and_after_unpausing_with_reason_and_confirmation_is_mailed_once()
 {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 2).await;
    let (held, other) = (ids[0], ids[1]);
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let page = format!("/invoices/{held}");
    browser.goto(&format!("{}{page}", console.url)).await;
    assert_eq!(
        browser.text("section.explain .reason").await,
        "will_send_today"
    );
    browser
        .fill("form.pause input[name=reason]", "customer disputes it")
        .await;
    browser.submit("form.pause button", &page).await;
    assert!(browser.text("#paused").await.contains("olga"));
    assert_eq!(
        browser.text("section.explain .reason").await,
        "paused_in_console"
    );
    let (reason, detail) = explained_reason(&world, held).await;
    assert_eq!(reason, "paused_in_console");
    assert!(
        detail.contains("by olga") && detail.contains("customer disputes it"),
        "{detail}"
    );

    tick(&world).await;
    let mailed: Vec<i64> = world
        .sink
        .received()
        .iter()
        .filter_map(|m| m.invoice_id())
        .collect();
    assert_eq!(mailed, vec![other], "the paused invoice is not mailed");

    // Unpausing without the confirmation changes nothing.
    browser
        .fill(
            "form.unpause input[name=reason]",
            "settled with the customer",
        )
        .await;
    browser
        .submit("form.unpause button", &format!("{page}/unpause"))
        .await;
    assert!(
        browser
            .text("#notice")
            .await
            .contains("Nothing was changed")
    );
    assert_eq!(explained_reason(&world, held).await.0, "paused_in_console");
    tick(&world).await;
    assert_eq!(world.sink.count(), 1, "still paused");

    browser.goto(&format!("{}{page}", console.url)).await;
    browser
        .fill(
            "form.unpause input[name=reason]",
            "settled with the customer",
        )
        .await;
    browser.click("form.unpause input[name=confirm]").await;
    browser.submit("form.unpause button", &page).await;
    assert_eq!(
        browser.text("section.explain .reason").await,
        "will_send_today"
    );
    tick(&world).await;
    tick(&world).await;
    let mailed: Vec<i64> = world
        .sink
        .received()
        .iter()
        .filter_map(|m| m.invoice_id())
        .collect();
    assert_eq!(mailed, vec![other, held], "mailed once after unpausing");

    browser.goto(&format!("{}/activity", console.url)).await;
    let log = browser.text("table.activity").await;
    assert!(
        log.contains(&format!("olga pause invoice {held} customer disputes it")),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "olga unpause invoice {held} settled with the customer"
        )),
        "{log}"
    );
    browser.close().await;
}

#[tokio::test]
async fn the_invoice_page_shows_the_message_id_sent_and_the_archived_message_with_its_hash_as_text()
{
    let mut world = World::new().await;
    world.set("archive.store", "database");
    let ids = common::insert_overdue(world.pool(), 1).await;
    let invoice = ids[0];
    sqlx::query("UPDATE invoices SET number = $1")
        .bind(SCRIPT)
        .execute(world.pool())
        .await
        .unwrap();
    tick(&world).await;
    let sent = world.sink.received();
    let message_id = sent[0].header("Message-ID").unwrap().trim();
    let message_id = message_id.trim_start_matches('<').trim_end_matches('>');
    let stored_hash: String = sqlx::query_scalar(
        "SELECT encode(message_sha256, 'hex') FROM reminders WHERE invoice_id = $1::text",
    )
    .bind(invoice)
    .fetch_one(world.pool())
    .await
    .unwrap();

    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let page = format!("{}/invoices/{invoice}", console.url);
    browser.goto(&page).await;
    assert_eq!(
        browser.text("table.history .message-id").await,
        format!("<{message_id}>")
    );
    assert_eq!(browser.text("code.sha256").await, stored_hash);
    assert_eq!(
        browser.text(".invoice-number").await,
        SCRIPT,
        "shown as text"
    );
    assert!(browser.text("pre.message-text").await.contains(SCRIPT));
    let amount = browser.text(".amount").await;
    assert!(
        sent[0].body.contains(&amount) && !amount.contains("minor"),
        "the amount as the mail writes it: {amount:?}"
    );
    let frame = browser
        .client
        .find(fantoccini::Locator::Css("iframe.message-html"))
        .await
        .unwrap();
    assert_eq!(
        frame.attr("sandbox").await.unwrap().as_deref(),
        Some(""),
        "sandboxed, no scripts"
    );
    browser.screenshot("invoice").await;

    let cookie = cookie(&browser).await;
    let (status, headers, body) = get(&format!("{page}/messages/{message_id}/raw"), &cookie).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "message/rfc822");
    assert_eq!(
        headers["content-disposition"],
        format!("attachment; filename=\"{message_id}.eml\"").as_str()
    );
    assert_eq!(hex(&sha2::Sha256::digest(&body)), stored_hash);
    let (status, headers, _) = get(&format!("{page}/messages/{message_id}"), &cookie).await;
    assert_eq!(status, 200);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.starts_with("sandbox;") && csp.contains("frame-ancestors 'self'"),
        "{csp}"
    );
    let (_, headers, _) = get(&page, &cookie).await;
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    let (status, _, _) = get(&format!("{page}/messages/not-its-message@x/raw"), &cookie).await;
    assert_eq!(status, 404, "only the invoice's own messages");

    browser
        .goto(&format!(
            "{}/invoices/{}",
            console.url, "%3Cb%3Enope%3C%2Fb%3E"
        ))
        .await;
    assert!(
        browser
            .text("main")
            .await
            .contains("Invoice <b>nope</b> is not")
    );
    let (status, _, _) = get(&format!("{}/invoices/nope", console.url), &cookie).await;
    assert_eq!(status, 404);

    assert!(
        browser.client.get_alert_text().await.is_err(),
        "no alert opened"
    );
    browser.goto(&page).await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        format!("Invoice {invoice} · invoice-reminder"),
        "title unchanged: no script ran"
    );
    browser.close().await;
}

#[tokio::test]
async fn a_viewers_pause_and_a_pause_without_the_token_change_nothing() {
    let world = World::new().await;
    let ids = common::insert_overdue(world.pool(), 1).await;
    let invoice = ids[0];
    let console = browser::start(&world).await;
    let url = format!("{}/invoices/{invoice}/pause", console.url);

    let viewer = Browser::open().await;
    viewer.sign_in(&console, VIEWER).await;
    viewer
        .goto(&format!("{}/invoices/{invoice}", console.url))
        .await;
    assert!(viewer.text("#read-only").await.contains("viewer"));
    assert!(
        viewer
            .client
            .find(fantoccini::Locator::Css("form.pause"))
            .await
            .is_err(),
        "no pause button for a viewer"
    );
    let csrf: String = viewer
        .client
        .execute(
            "return document.querySelector('input[name=csrf]').value",
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let status = browser::post_status(
        &url,
        &format!("reason=mine&csrf={csrf}"),
        Some(&cookie(&viewer).await),
    )
    .await;
    assert_eq!(status, 403, "a viewer");
    viewer.close().await;

    let operator = Browser::open().await;
    operator.sign_in(&console, OPERATOR).await;
    let status =
        browser::post_status(&url, "reason=no+token", Some(&cookie(&operator).await)).await;
    assert_eq!(status, 403, "no token");
    operator.close().await;

    let pauses: i64 = sqlx::query_scalar("SELECT count(*) FROM console_pauses")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(pauses, 0, "nothing paused");
    tick(&world).await;
    assert_eq!(world.sink.count(), 1, "still mailed");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_paused_customer_gets_no_statement_until_unpaused() {
    let world = customer_mode_world().await;
    let (customer, ids) = one_customer_owing(&world, 2).await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let page = format!("/customers/{customer}");
    browser.goto(&format!("{}{page}", console.url)).await;
    browser
        .fill("form.pause input[name=reason]", "in insolvency")
        .await;
    browser.submit("form.pause button", &page).await;
    assert!(browser.text("#paused").await.contains("in insolvency"));
    let (reason, detail) = explained_reason(&world, ids[1]).await;
    assert_eq!(reason, "paused_in_console");
    assert!(
        detail.contains(&format!("its customer {customer}")),
        "{detail}"
    );
    tick(&world).await;
    assert_eq!(world.sink.count(), 0, "no statement for a paused customer");

    browser
        .fill("form.unpause input[name=reason]", "out of insolvency")
        .await;
    browser.click("form.unpause input[name=confirm]").await;
    browser.submit("form.unpause button", &page).await;
    tick(&world).await;
    assert_eq!(world.sink.count(), 1, "one statement after unpausing");
    browser.close().await;
}

#[tokio::test]
async fn the_customer_page_shows_the_zone_the_calendar_and_why_the_window_is_closed() {
    let mut world = customer_mode_world().await;
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Pacific/Honolulu")
        .set("send_window.calendar", "US");
    let (customer, _) = one_customer_owing(&world, 2).await;
    // Saturday 9 January 2027, 10:00 in Honolulu.
    common::clock_at(&world, "2027-01-09T20:00:00Z").await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;

    browser
        .goto(&format!("{}/customers/{customer}", console.url))
        .await;

    assert_eq!(browser.text("#timezone").await, "Pacific/Honolulu");
    assert_eq!(browser.text("#calendar").await, "US");
    let window = browser.text("#window").await;
    assert!(
        window.contains("Mon,Tue,Wed,Thu,Fri, 09:00-17:00"),
        "{window}"
    );
    let invoices = browser.text("table.invoices").await;
    assert!(
        invoices.contains(
            "waiting for the send window: opens Mon 2027-01-11 09:00 Pacific/Honolulu (weekend)"
        ),
        "{invoices}"
    );
    browser.close().await;
}

#[tokio::test]
async fn the_customer_page_shows_the_customers_own_zone_and_calendar() {
    let mut world = customer_mode_world().await;
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Pacific/Honolulu")
        .set("send_window.calendar", "US");
    let (customer, _) = one_customer_owing(&world, 2).await;
    sqlx::query(
        "UPDATE customers SET timezone = 'Asia/Tokyo', holiday_calendar = 'DE-BY' WHERE id::text = $1",
    )
    .bind(customer.to_string())
    .execute(world.pool())
    .await
    .unwrap();
    // Saturday 9 January 2027, 20:00 UTC: Sunday 05:00 in Tokyo.
    common::clock_at(&world, "2027-01-09T20:00:00Z").await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;

    browser
        .goto(&format!("{}/customers/{customer}", console.url))
        .await;

    assert_eq!(browser.text("#timezone").await, "Asia/Tokyo");
    assert_eq!(browser.text("#calendar").await, "DE-BY");
    let invoices = browser.text("table.invoices").await;
    assert!(
        invoices.contains(
            "waiting for the send window: opens Mon 2027-01-11 09:00 Asia/Tokyo (weekend)"
        ),
        "{invoices}"
    );
    browser.close().await;
}

/// Counts the statements sqlx runs (its `sqlx::query` events) on this
/// thread, where the test's runtime also serves the console.
struct Statements(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn a_customers_page_with_200_invoices_takes_at_most_10_statements() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let world = customer_mode_world().await;
    let (customer, _) = one_customer_owing(&world, 200).await;
    tick(&world).await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, OPERATOR).await;
    let cookie = cookie(&browser).await;
    let page = format!("{}/customers/{customer}", console.url);
    // Once before counting: the connections are made and warm.
    get(&page, &cookie).await;
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriber =
        tracing_subscriber::registry().with(Statements(std::sync::Arc::clone(&counted)));
    let counting = tracing::subscriber::set_default(subscriber);

    let (status, _, body) = get(&page, &cookie).await;

    drop(counting);
    let statements = counted.load(std::sync::atomic::Ordering::SeqCst);
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.matches("/invoices/").count() >= 200,
        "every invoice listed"
    );
    assert!(statements > 0, "the statements are counted");
    assert!(statements <= 10, "{statements} statements for the page");
}

async fn customer_mode_world() -> World {
    let mut world = World::new().await;
    world.set("reminders.group_by", "customer");
    world
}

/// `n` overdue invoices, all of one customer: its id and theirs.
async fn one_customer_owing(world: &World, n: i64) -> (i64, Vec<i64>) {
    let ids = common::insert_overdue(world.pool(), n).await;
    let customer: i64 = sqlx::query_scalar(
        "UPDATE invoices SET customer_id = (SELECT min(customer_id) FROM invoices)
          RETURNING customer_id",
    )
    .fetch_all(world.pool())
    .await
    .unwrap()[0];
    (customer, ids)
}
