//! Late-payment claims in the console: the invoice page shows today's
//! claim with its working and offers the letter sent, as sent; the
//! problems page says which regimes wait for a rate.

use crate::browser::{self, Browser, VIEWER, tick};
use crate::common::{self, World};
use crate::invoices::{cookie, get};

/// The database clock at noon UTC on `date`.
async fn clock_at(world: &World, date: &str) {
    common::clock_at(world, &format!("{date} 12:00:00+00")).await;
}

/// An invoice of 1,000.00 EUR due on `due`.
async fn invoice(world: &World, due: &str) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (INSERT INTO customers (name, email) VALUES ('Müller GmbH', 'ap@example.test') RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-LP', 100000, 'EUR', $1::date FROM c RETURNING id",
    )
    .bind(due)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn the_invoice_page_shows_the_claims_working_and_serves_the_letter_as_sent() {
    let mut world = World::new().await;
    world
        .set("archive.store", "database")
        .set("late_payment.regime", "eu");
    clock_at(&world, "2025-07-11").await;
    let id = invoice(&world, "2025-06-20").await;
    tick(&world).await;
    let sent = world.sink.received();
    let message_id = sent[0].header("Message-ID").unwrap().trim();
    let message_id = message_id.trim_start_matches('<').trim_end_matches('>');
    let letter_sent = {
        use mail_parser::MimeHeaders as _;
        let parsed = mail_parser::MessageParser::default()
            .parse(sent[0].raw.as_bytes())
            .unwrap();
        let part = parsed.attachments().next().expect("a letter");
        assert_eq!(part.attachment_name(), Some("letter-INV-LP.pdf"));
        part.contents().to_vec()
    };

    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, VIEWER).await;
    let page = format!("{}/invoices/{id}", console.url);
    browser.goto(&page).await;
    let working = browser.text("#late-payment pre.working").await;
    for line in [
        "late payment under eu (ECB rate + 8 points, 40 EUR), 21 days late:",
        "2025-06-21 to 2025-06-30: 10 days at 11.15 % = 3.05 EUR",
        "2025-07-01 to 2025-07-11: 11 days at 10.15 % = 3.06 EUR",
        "interest 6.11 EUR (summed exactly, rounded once), compensation 40.00 EUR, total claimed 46.11 EUR, amount now due 1046.11 EUR",
    ] {
        assert!(working.contains(line), "{line:?} not in:\n{working}");
    }
    assert!(browser.text("a.letter").await.contains("letter-INV-LP.pdf"));
    let cookie = cookie(&browser).await;
    let (status, headers, body) = get(
        &format!("{page}/messages/{message_id}/letters/letter-INV-LP.pdf"),
        &cookie,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/pdf");
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename=\"letter-INV-LP.pdf\""
    );
    assert_eq!(body, letter_sent, "the letter as sent, from the archive");
    let (status, _, _) = get(
        &format!("{page}/messages/{message_id}/letters/other.pdf"),
        &cookie,
    )
    .await;
    assert_eq!(status, 404);
    browser.close().await;
}

#[tokio::test]
async fn the_problems_page_says_which_regimes_wait_for_a_rate() {
    let mut world = World::new().await;
    let rates = std::env::temp_dir().join(format!("rates-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &rates,
        "ecb = [{ from = \"2025-01-01\", percent = 3.15 }]\nde_base = [{ from = \"2025-07-01\", percent = 1.27 }]\n",
    )
    .unwrap();
    world
        .set("late_payment.regime", "eu")
        .set("late_payment.rates_file", rates.display());
    clock_at(&world, "2025-07-11").await;
    let console = browser::start(&world).await;
    let browser = Browser::open().await;
    browser.sign_in(&console, VIEWER).await;
    browser.goto(&format!("{}/problems", console.url)).await;
    let notice = browser.text(".rates-out-of-date").await;
    assert!(
        notice.contains("no ecb rate for the half-year from 2025-07-01")
            && notice.contains("late_payment.regime eu"),
        "{notice}"
    );
    browser.close().await;
}
