//! Late-payment interest by the law that applies, against figures worked
//! out by hand (docs/late-payment.md): the final notice states the claim
//! and carries a PDF letter with the same figures; regimes are chosen per
//! invoice; compensation is claimed once; stages that cannot be priced
//! wait while others go; a rates file with a gap stops the start-up.

use std::path::PathBuf;

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

/// The database clock at noon UTC on `date` (`YYYY-MM-DD`): the worker's
/// today, and the send date of a claim.
async fn clock_at(world: &World, date: &str) {
    common::clock_at(world, &format!("{date} 12:00:00+00")).await;
}

/// One invoice of `amount` minor units of `currency`, due on `due`, for a
/// customer whose regime is `regime` (NULL: the setting's).
async fn invoice(
    world: &World,
    due: &str,
    amount: i64,
    currency: &str,
    regime: Option<&str>,
) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (INSERT INTO customers (name, email, late_payment_regime)
                    VALUES ('Müller GmbH', 'ap' || md5(random()::text) || '@example.test', $4)
                    RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, $2, $3, $1::date FROM c RETURNING id",
    )
    .bind(due)
    .bind(amount)
    .bind(currency)
    .bind(regime)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

fn mail(world: &World, invoice: i64) -> common::smtp::Received {
    crate::templates::mail_for(world, invoice)
}

/// The PDF files a received mail carries, by name.
fn letters(raw: &str) -> Vec<(String, Vec<u8>)> {
    use mail_parser::MimeHeaders as _;
    let parsed = mail_parser::MessageParser::default()
        .parse(raw.as_bytes())
        .expect("a parsable mail");
    parsed
        .attachments()
        .filter(|p| {
            p.content_type()
                .is_some_and(|t| t.ctype() == "application" && t.subtype() == Some("pdf"))
        })
        .map(|p| {
            (
                p.attachment_name().unwrap_or_default().to_owned(),
                p.contents().to_vec(),
            )
        })
        .collect()
}

/// `pdftotext -layout` and `pdfinfo` of a PDF.
fn pdf_text_and_info(pdf: &[u8]) -> (String, String) {
    let path = std::env::temp_dir().join(format!("letter-{}.pdf", uuid::Uuid::new_v4()));
    std::fs::write(&path, pdf).unwrap();
    let run = |cmd: &str, args: &[&str]| {
        let out = std::process::Command::new(cmd)
            .args(args)
            .arg(&path)
            .args(if cmd == "pdftotext" {
                &["-"][..]
            } else {
                &[][..]
            })
            .output()
            .unwrap_or_else(|e| panic!("{cmd}: {e} (apt-get install poppler-utils)"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run("pdftotext", &["-layout"]);
    let info = run("pdfinfo", &[]);
    let _ = std::fs::remove_file(&path);
    (text, info)
}

#[tokio::test]
async fn the_final_notice_claims_interest_per_half_year_and_its_letter_shows_the_same_figures() {
    let mut world = World::new().await;
    world.set("late_payment.regime", "eu");
    clock_at(&world, "2025-07-11").await;
    // 1,000.00 EUR due 20 June 2025, final notice on 11 July (21 days):
    // 10 days at 3.15 + 8 = 11.15 %: 3.054794... EUR
    // 11 days at 2.15 + 8 = 10.15 %: 3.058904... EUR
    // interest 6.113698... -> 6.11 EUR; compensation 40.00; total 46.11.
    let id = invoice(&world, "2025-06-20", 100_000, "EUR", None).await;

    tick(&world).await;

    let m = mail(&world, id);
    assert_eq!(m.period().as_deref(), Some("final"));
    assert_eq!(m.content_type, "multipart/mixed", "{}", m.raw);
    for figure in [
        "10 days at 11.15 %",
        "11 days at 10.15 %",
        "Interest: 6.11 EUR",
        "Compensation: 40.00 EUR",
        "Total claimed: 46.11 EUR",
        "Amount now due: 1,046.11 EUR",
        "July 21, 2025",
    ] {
        assert!(m.body.contains(figure), "{figure:?} not in:\n{}", m.body);
    }
    let letters = letters(&m.raw);
    let number = format!(
        "INV-{}",
        sqlx::query_scalar::<_, i64>("SELECT customer_id FROM invoices WHERE id = $1")
            .bind(id)
            .fetch_one(world.pool())
            .await
            .unwrap()
    );
    assert_eq!(
        letters.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        vec![format!("letter-{number}.pdf")]
    );
    let (text, info) = pdf_text_and_info(&letters[0].1);
    assert!(info.contains("(A4)"), "{info}");
    for figure in [
        number.as_str(),
        "1,000.00 EUR",
        "11.15",
        "10.15",
        "3.05 EUR",
        "3.06 EUR",
        "6.11 EUR",
        "40.00 EUR",
        "46.11 EUR",
        "1,046.11 EUR",
        "July 21, 2025",
        "Müller GmbH",
        "Directive 2011/7/EU",
    ] {
        assert!(
            text.contains(figure),
            "{figure:?} not in the letter:\n{text}"
        );
    }
    // The letter is part of what was sent: the proof's hash covers it.
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT message_sha256 FROM reminders WHERE invoice_id = $1::text")
            .bind(id)
            .fetch_one(world.pool())
            .await
            .unwrap();
    use sha2::Digest as _;
    assert_eq!(stored, sha2::Sha256::digest(m.raw.as_bytes()).to_vec());
}

#[tokio::test]
async fn each_invoice_is_claimed_under_the_regime_its_row_names() {
    let mut world = World::new().await;
    world.set("late_payment.regime", "eu");
    clock_at(&world, "2025-09-30").await;
    // 500.00 EUR, 21 days in the second half of 2025 (base rate 1.27 %):
    // de-b2b 10.27 %: 2.954383... -> 2.95 EUR, and 40 EUR;
    // de-b2c  6.27 %: 1.803698... -> 1.80 EUR, and nothing;
    // fr     12.15 %: 3.495205... -> 3.50 EUR, and 40 EUR;
    // a USD invoice under eu, 10.15 %: 2.920 -> 2.92 USD, no compensation.
    let b2b = invoice(&world, "2025-09-09", 50_000, "EUR", Some("de-b2b")).await;
    let b2c = invoice(&world, "2025-09-09", 50_000, "EUR", Some("DE-B2C")).await;
    let fr = invoice(&world, "2025-09-09", 50_000, "EUR", Some("fr")).await;
    let usd = invoice(&world, "2025-09-09", 50_000, "USD", None).await;
    let bogus = invoice(&world, "2025-09-09", 50_000, "EUR", Some("de")).await;

    tick(&world).await;

    for (id, figures) in [
        (
            b2b,
            [
                "Interest: 2.95 EUR",
                "Compensation: 40.00 EUR",
                "Total claimed: 42.95 EUR",
            ],
        ),
        (
            b2c,
            [
                "Interest: 1.80 EUR",
                "Compensation: 0.00 EUR",
                "Total claimed: 1.80 EUR",
            ],
        ),
        (
            fr,
            [
                "Interest: 3.50 EUR",
                "Compensation: 40.00 EUR",
                "Total claimed: 43.50 EUR",
            ],
        ),
        (
            usd,
            [
                "Interest: 2.92 USD",
                "Compensation: 0.00 USD",
                "Total claimed: 2.92 USD",
            ],
        ),
    ] {
        let m = mail(&world, id);
        for figure in figures {
            assert!(
                m.body.contains(figure),
                "{id}: {figure:?} not in:\n{}",
                m.body
            );
        }
    }
    // A row whose regime is not one is a source problem: never claimed.
    assert!(
        world
            .sink
            .received()
            .iter()
            .all(|m| m.invoice_id() != Some(bogus))
    );
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = $1::text")
            .bind(bogus)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(rows, 0);
    let out = common::cli(&world, &["check-source"]).await;
    let text = format!(
        "{}{}",
        common::stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("unknown_late_payment_regime"), "{text}");
}

#[tokio::test]
async fn compensation_is_claimed_once_across_three_final_notices() {
    let mut world = World::new().await;
    // Dates after the real clock's, so that the gap between reminders
    // (counted from their real claim times) is over at each step.
    let rates = rates_file(
        "ecb = [{ from = \"2026-07-01\", percent = 2.15 }, { from = \"2027-01-01\", percent = 2.15 }]",
    );
    world
        .set("late_payment.regime", "eu")
        .set("late_payment.rates_file", rates.display());
    let id = invoice(&world, "2027-02-01", 100_000, "EUR", None).await;
    let mut claims = Vec::new();
    // final on day 21, final-2 on day 35, final-3 on day 49.
    for (n, date) in ["2027-02-22", "2027-03-08", "2027-03-22"]
        .into_iter()
        .enumerate()
    {
        clock_at(&world, date).await;
        tick(&world).await;
        world.wait_for_mails(n + 1).await;
        let m = world
            .sink
            .received()
            .into_iter()
            .rfind(|m| m.invoice_id() == Some(id))
            .unwrap();
        claims.push(m.body);
    }
    // 1,000.00 EUR at 10.15 %: 21 days 5.84, 35 days 9.73, 49 days 13.63.
    for (body, interest, total) in [
        (&claims[0], "5.84 EUR", "45.84 EUR"),
        (&claims[1], "9.73 EUR", "49.73 EUR"),
        (&claims[2], "13.63 EUR", "53.63 EUR"),
    ] {
        assert!(body.contains(&format!("Interest: {interest}")), "{body}");
        assert!(body.contains("Compensation: 40.00 EUR"), "{body}");
        assert!(body.contains(&format!("Total claimed: {total}")), "{body}");
    }
}

/// A rates file of `text`, in the temp dir.
fn rates_file(text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("rates-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn late_payment_stages_wait_for_a_missing_half_year_while_other_stages_go() {
    let mut world = World::new().await;
    let rates = rates_file("ecb = [{ from = \"2025-07-01\", percent = 2.15 }]");
    world
        .set("late_payment.regime", "eu")
        .set("late_payment.rates_file", rates.display());
    clock_at(&world, "2026-01-20").await;
    let overdue = invoice(&world, "2026-01-16", 10_000, "EUR", None).await;
    let final_due = invoice(&world, "2025-12-29", 10_000, "EUR", None).await;
    let none = invoice(&world, "2025-12-29", 10_000, "EUR", Some("none")).await;

    tick(&world).await;

    let mailed = world.sink.invoice_ids();
    assert!(mailed.contains(&overdue), "{mailed:?}");
    assert!(
        mailed.contains(&none),
        "regime none claims nothing and waits for nothing"
    );
    assert!(!mailed.contains(&final_due), "{mailed:?}");
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = $1::text")
            .bind(final_due)
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(rows, 0, "never a claim at a stale rate");
    let out = common::cli(
        &world,
        &["explain", "--invoice", &final_due.to_string(), "--json"],
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::stdout(&out)));
    assert_eq!(json["reason"], "rates_out_of_date", "{json}");
    assert!(json["late_payment"].is_null());
    // Once the half-year's rate is in the file, it goes.
    std::fs::write(
        &rates,
        "ecb = [{ from = \"2025-07-01\", percent = 2.15 }, { from = \"2026-01-01\", percent = 2.15 }]",
    )
    .unwrap();
    tick(&world).await;
    assert!(world.sink.invoice_ids().contains(&final_due));
}

#[tokio::test]
async fn explain_shows_the_claim_with_its_working_and_writes_nothing() {
    let mut world = World::new().await;
    world.set("late_payment.regime", "eu");
    clock_at(&world, "2025-07-11").await;
    let id = invoice(&world, "2025-06-20", 100_000, "EUR", None).await;
    let out = common::cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::stdout(&out)));
    let late = &json["late_payment"];
    assert_eq!(late["regime"], "eu", "{json}");
    assert_eq!(late["days"], 21);
    assert_eq!(late["interest_minor"], 611);
    assert_eq!(late["compensation_minor"], 4000);
    assert_eq!(late["total_minor"], 4611);
    assert_eq!(late["periods"][0]["from"], "2025-06-21");
    assert_eq!(late["periods"][0]["to"], "2025-06-30");
    assert_eq!(late["periods"][0]["days"], 10);
    assert_eq!(late["periods"][0]["rate_percent"], 11.15);
    assert_eq!(late["periods"][0]["interest_minor"], 305);
    assert_eq!(late["periods"][1]["rate_percent"], 10.15);
    assert_eq!(late["periods"][1]["interest_minor"], 306);
    let out = common::cli(&world, &["explain", "--invoice", &id.to_string()]).await;
    let text = common::stdout(&out);
    assert!(
        text.contains("2025-06-21 to 2025-06-30: 10 days at 11.15 % = 3.05 EUR"),
        "{text}"
    );
    assert!(text.contains("total claimed 46.11 EUR"), "{text}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn under_regime_none_the_final_notice_claims_nothing_and_carries_no_letter() {
    let world = World::new().await;
    clock_at(&world, "2025-07-11").await;
    let id = invoice(&world, "2025-06-20", 100_000, "EUR", None).await;

    tick(&world).await;

    let m = mail(&world, id);
    assert_eq!(m.period().as_deref(), Some("final"));
    assert_eq!(m.content_type, "multipart/alternative");
    assert!(!m.body.contains("Total claimed"), "{}", m.body);
    assert!(letters(&m.raw).is_empty());
}

#[tokio::test]
async fn a_rates_file_with_a_gap_stops_the_start_up_naming_the_series_and_the_half_year() {
    let mut world = World::new().await;
    let rates = rates_file(
        "# rates\nde_base = [\n  { from = \"2024-01-01\", percent = 3.62 },\n  { from = \"2025-01-01\", percent = 2.27 },\n]\n",
    );
    world.set("late_payment.rates_file", rates.display());
    let out = common::cli(&world, &["run-once"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&rates.display().to_string()), "{err}");
    assert!(
        err.contains("de_base") && err.contains("2024-07-01"),
        "{err}"
    );
    std::fs::write(&rates, "ecb = [{ from = \"2024-01-01\" percent = 4.5 }]\n").unwrap();
    let out = common::cli(&world, &["run-once"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("line 1"), "{err}");
    world
        .set("late_payment.rates_file", "")
        .set("late_payment.regime", "de");
    let out = common::cli(&world, &["run-once"]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("late_payment.regime"), "{err}");
}

/// One customer with an invoice of 1,000.00 EUR due on each of `dues`.
async fn customer_with(world: &World, dues: &[&str]) -> Vec<i64> {
    let customer: i64 = sqlx::query_scalar(
        "INSERT INTO customers (name, email) VALUES ('Dupont SA', 'dupont@example.test') RETURNING id",
    )
    .fetch_one(world.pool())
    .await
    .unwrap();
    let mut ids = Vec::new();
    for due in dues {
        ids.push(
            sqlx::query_scalar(
                "INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
                 VALUES ($1, 'F-' || $2, 100000, 'EUR', $2::date) RETURNING id",
            )
            .bind(customer)
            .bind(*due)
            .fetch_one(world.pool())
            .await
            .unwrap(),
        );
    }
    ids
}

#[tokio::test]
async fn a_statement_states_each_late_invoices_claim_and_carries_its_letter() {
    let mut world = World::new().await;
    world
        .set("reminders.group_by", "customer")
        .set("late_payment.regime", "eu");
    clock_at(&world, "2025-07-11").await;
    // The first owes `final` (21 days: a claim of 6.11 + 40.00 EUR), the
    // second `overdue` (3 days: no claim).
    customer_with(&world, &["2025-06-20", "2025-07-08"]).await;

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    let body = &mails[0].body;
    assert!(
        body.contains("interest 6.11 EUR (10 days at 11.15 %, 11 days at 10.15 %), compensation 40.00 EUR, total claimed 46.11 EUR"),
        "{body}"
    );
    assert_eq!(
        body.matches("Under Directive 2011/7/EU").count(),
        1,
        "{body}"
    );
    let names: Vec<String> = letters(&mails[0].raw).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["letter-F-2025-06-20.pdf".to_owned()]);
}

#[tokio::test]
async fn in_customer_mode_a_late_invoice_waits_for_its_rate_and_the_rest_of_the_statement_goes() {
    let mut world = World::new().await;
    let rates = rates_file("ecb = [{ from = \"2025-01-01\", percent = 3.15 }]");
    world
        .set("reminders.group_by", "customer")
        .set("late_payment.regime", "eu")
        .set("late_payment.rates_file", rates.display());
    clock_at(&world, "2025-07-11").await;
    let ids = customer_with(&world, &["2025-06-20", "2025-07-08"]).await;

    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    assert_eq!(
        mails[0].header("X-Invoice-Id").map(str::trim),
        Some(ids[1].to_string().as_str())
    );
    assert!(letters(&mails[0].raw).is_empty());
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM reminders WHERE invoice_id = $1::text")
            .bind(ids[0])
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(rows, 0, "never a claim at a stale rate");
}
