//! What customers read: templates per language, money and dates in their
//! locale, HTML that cannot be injected into, the user's own templates,
//! and `preview`. Broken templates stop start-up.

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, TemplateDir, World};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

pub(crate) fn mail_for(world: &World, invoice: i64) -> common::smtp::Received {
    world
        .sink
        .received()
        .into_iter()
        .find(|m| m.invoice_id() == Some(invoice))
        .unwrap_or_else(|| panic!("no mail for invoice {invoice}"))
}

#[tokio::test]
async fn customers_get_their_language_with_fallback_to_the_language_then_the_default() {
    let world = World::new().await;
    let de = common::insert_invoice_in(world.pool(), "De", Some("de"), 10, 123_456, "EUR").await;
    let de_ch =
        common::insert_invoice_in(world.pool(), "Ch", Some("de-CH"), 10, 123_456, "EUR").await;
    let unknown =
        common::insert_invoice_in(world.pool(), "Xx", Some("xx"), 10, 123_456, "EUR").await;
    let none = common::insert_invoice_in(world.pool(), "No", None, 10, 123_456, "EUR").await;

    tick(&world).await;

    for invoice in [de, de_ch] {
        let mail = mail_for(&world, invoice);
        assert!(
            mail.subject.starts_with("Zahlungserinnerung"),
            "{}",
            mail.subject
        );
        assert!(mail.body.contains("überfällig"), "{}", mail.body);
    }
    for invoice in [unknown, none] {
        let mail = mail_for(&world, invoice);
        assert!(
            mail.subject.starts_with("Payment reminder"),
            "{}",
            mail.subject
        );
    }
    // The German template, formatted the Swiss way (CLDR): the language picks
    // the words, the full locale the numbers.
    assert!(
        mail_for(&world, de).body.contains("1.234,56 EUR"),
        "{}",
        mail_for(&world, de).body
    );
    assert!(
        mail_for(&world, de_ch).body.contains("1'234.56 EUR"),
        "{}",
        mail_for(&world, de_ch).body
    );
    assert!(mail_for(&world, none).body.contains("1,234.56 EUR"));
}

#[tokio::test]
async fn amounts_use_each_currencys_minor_units_in_english_and_german() {
    let world = World::new().await;
    let mut cases = Vec::new();
    for (locale, amount, currency, shown) in [
        (None, 1000, "JPY", "1,000 JPY"),
        (Some("de"), 1000, "JPY", "1.000 JPY"),
        (None, 123_456, "EUR", "1,234.56 EUR"),
        (Some("de"), 123_456, "EUR", "1.234,56 EUR"),
        (None, 1_234_567, "KWD", "1,234.567 KWD"),
        (Some("de"), 1_234_567, "KWD", "1.234,567 KWD"),
    ] {
        let id = common::insert_invoice_in(
            world.pool(),
            &format!("{amount}{currency}{locale:?}"),
            locale,
            10,
            amount,
            currency,
        )
        .await;
        cases.push((id, shown));
    }

    tick(&world).await;

    for (id, shown) in cases {
        let body = mail_for(&world, id).body;
        assert!(
            body.contains(shown),
            "invoice {id} should show {shown}: {body}"
        );
    }
}

#[tokio::test]
async fn the_html_part_escapes_customer_data_and_the_message_is_multipart_alternative() {
    let world = World::new().await;
    let id = common::insert_invoice(
        world.pool(),
        "<script>alert(1)</script>",
        "x@example.test",
        10,
        false,
    )
    .await;

    tick(&world).await;

    let mail = mail_for(&world, id);
    assert_eq!(mail.content_type, "multipart/alternative");
    let html = mail.html.expect("an HTML part");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>"), "{html}");
    assert!(
        mail.body.contains("<script>alert(1)</script>"),
        "text is not escaped: {}",
        mail.body
    );
}

#[tokio::test]
async fn a_templates_dir_overrides_the_built_in_wording_and_company_settings_reach_the_message() {
    let dir = TemplateDir::new(&[
        (
            "en/overdue.subject.j2",
            "Invoice {{ invoice.number }}: {{ company.name }} is waiting\n",
        ),
        (
            "en/overdue.txt.j2",
            "Pay {{ invoice.amount | money(invoice.currency) }} by {{ invoice.due_date | date(\"%d/%m/%Y\") }} at {{ company.payment_url }}\n",
        ),
    ]);
    let mut world = World::new().await;
    world
        .set("templates.dir", dir.path.display())
        .set("company.name", "Acme")
        .set("company.reply_to", "Accounts <accounts@acme.test>")
        .set(
            "company.payment_url",
            "https://pay.acme.test/i/{{ invoice.number }}",
        );
    let id = common::insert_invoice(world.pool(), "Ada", "ada@example.test", 10, false).await;

    tick(&world).await;

    let mail = mail_for(&world, id);
    assert!(
        mail.subject.ends_with(": Acme is waiting"),
        "{}",
        mail.subject
    );
    assert!(
        mail.body.contains("https://pay.acme.test/i/INV-X-"),
        "{}",
        mail.body
    );
    assert!(mail.body.contains("Pay 50.00 EUR by "), "{}", mail.body);
    assert_eq!(
        mail.html, None,
        "no HTML template in the directory: text only"
    );
    assert!(
        mail.header("Reply-To")
            .is_some_and(|r| r.contains("accounts@acme.test")),
        "{:?}",
        mail.headers
    );
}

/// `invoice-reminder run-once` with extra environment: exit code and stderr.
pub(crate) async fn start_with(world: &World, env: &[(&str, String)]) -> (Option<i32>, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
        .arg("run-once")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .envs(env.iter().map(|(k, v)| (k.to_string(), v.clone())))
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_broken_template_fails_start_up_with_exit_2_naming_the_file_and_line() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 1).await;
    let undefined = TemplateDir::new(&[
        ("en/overdue.subject.j2", "Reminder\n"),
        ("en/overdue.txt.j2", "Hello\n{{ customer.nmae }}\n"),
    ]);
    let syntax = TemplateDir::new(&[("de/final.html.j2", "<p>\n\n{% if %}</p>\n")]);

    for (dir, file, line) in [
        (&undefined, "en/overdue.txt.j2", "line 2"),
        (&syntax, "de/final.html.j2", "line 3"),
    ] {
        let (code, stderr) = start_with(
            &world,
            &[(
                "INVOICE_REMINDER__TEMPLATES__DIR",
                dir.path.display().to_string(),
            )],
        )
        .await;
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(file) && stderr.contains(line), "{stderr}");
    }
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test]
async fn a_default_locale_without_a_stage_template_fails_start_up_with_exit_2() {
    let world = World::new().await;
    let partial = TemplateDir::new(&[
        ("fr/upcoming.subject.j2", "x\n"),
        ("fr/upcoming.txt.j2", "x\n"),
    ]);

    let (code, stderr) = start_with(
        &world,
        &[
            (
                "INVOICE_REMINDER__TEMPLATES__DIR",
                partial.path.display().to_string(),
            ),
            (
                "INVOICE_REMINDER__TEMPLATES__DEFAULT_LOCALE",
                "fr".to_owned(),
            ),
        ],
    )
    .await;

    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("templates.default_locale") && stderr.contains("fr/overdue.subject.j2"),
        "{stderr}"
    );
}

#[tokio::test]
async fn preview_prints_the_message_the_tick_would_send_and_writes_nothing() {
    let mut world = World::new().await;
    world.set("smtp.message_id_domain", "mail.test");
    let id = common::insert_invoice_in(world.pool(), "Ada", Some("de"), 10, 123_456, "EUR").await;
    let id_text = id.to_string();

    let text = common::cli(&world, &["preview", "--invoice", &id_text]).await;
    let html = common::cli(
        &world,
        &[
            "preview",
            "--invoice",
            &id_text,
            "--html",
            "--stage",
            "final-2",
            "--locale",
            "en",
        ],
    )
    .await;
    let bad = common::cli(
        &world,
        &["preview", "--invoice", &id_text, "--stage", "final-9"],
    )
    .await;

    let shown = common::stdout(&text);
    assert_eq!(
        text.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(
        shown.contains(&format!("Message-ID: <invoice-{id}.overdue@mail.test>")),
        "{shown}"
    );
    assert!(shown.contains("X-Reminder-Period: overdue"), "{shown}");
    assert!(shown.contains("subject: Zahlungserinnerung"), "{shown}");
    assert!(shown.contains("1.234,56 EUR"), "{shown}");
    let shown = common::stdout(&html);
    assert_eq!(
        html.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&html.stderr)
    );
    assert!(shown.contains("subject: Final notice (2)"), "{shown}");
    assert!(shown.contains("<html"), "{shown}");
    assert!(
        shown.contains(&format!("invoice-{id}.final-2@mail.test")),
        "{shown}"
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("final-3"),
        "lists the steps"
    );
    assert!(
        common::statuses(world.pool()).await.is_empty(),
        "preview writes nothing"
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test]
async fn a_bad_stage_list_is_refused_at_start_up_naming_the_key() {
    let world = World::new().await;
    for (stages, key) in [
        (
            "[{name=a,days=1,template=overdue},{name=a,days=2,template=overdue}]",
            "reminders.stages[1].name",
        ),
        (
            "[{name=a,days=5,template=overdue},{name=b,days=5,template=overdue}]",
            "reminders.stages[1].days",
        ),
        (
            "[{name=a,days=1,template=overdue,repeat_every_days=7}]",
            "reminders.stages[0].repeat_every_days",
        ),
        (
            "[{name=a,days=1,template=overdue,repeat_every_days=7,max_repeats=1},{name=b,days=9,template=final}]",
            "reminders.stages[0].repeat_every_days",
        ),
        (
            "[{name=final-2,days=1,template=final}]",
            "reminders.stages[0].name",
        ),
    ] {
        let (code, stderr) = start_with(
            &world,
            &[("INVOICE_REMINDER__REMINDERS__STAGES", stages.to_owned())],
        )
        .await;
        assert_eq!(code, Some(2), "{stages}: {stderr}");
        assert!(stderr.contains(key), "{stages} should name {key}: {stderr}");
    }
}

/// A source view over the demo tables whose `payment_url` is the
/// invoice's `link` column (added here).
async fn use_a_source_with_links(world: &mut World) {
    sqlx::raw_sql(
        "ALTER TABLE invoice_reminder.invoices ADD COLUMN link text;
         CREATE SCHEMA linked;
         CREATE VIEW linked.invoices AS
         SELECT i.id::text AS invoice_id, i.number AS invoice_number,
                c.name AS customer_name, c.email, c.locale,
                i.amount_cents AS amount_minor, i.currency, i.due_date,
                i.paid_at IS NOT NULL AS is_paid, c.reminders_paused AS paused,
                i.reminders_paused_until AS paused_until, i.link AS payment_url
           FROM invoice_reminder.invoices i
           JOIN invoice_reminder.customers c ON c.id = i.customer_id;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world.set("source.relation", "linked.invoices");
}

/// An overdue invoice whose source link is `link`.
async fn insert_linked(world: &World, name: &str, link: &str) -> i64 {
    let id = common::insert_invoice(
        world.pool(),
        name,
        &format!("{name}@example.test"),
        10,
        false,
    )
    .await;
    sqlx::query("UPDATE invoices SET link = $2 WHERE id = $1")
        .bind(id)
        .bind(link)
        .execute(world.pool())
        .await
        .unwrap();
    id
}

/// The HTML as a browser reads an attribute: entities decoded.
fn unescape_html(html: &str) -> String {
    html.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Every `href="..."` of an HTML part, decoded.
pub(crate) fn hrefs(html: &str) -> Vec<String> {
    unescape_html(html)
        .split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(href, _)| href.to_owned()))
        .collect()
}

#[tokio::test]
async fn a_source_link_that_is_not_an_absolute_http_url_is_dropped_with_a_warning_naming_the_invoice()
 {
    let mut world = World::new().await;
    use_a_source_with_links(&mut world).await;
    let bad = [
        ("js", "javascript:alert(1)"),
        ("relative", "/pay/7"),
        ("data", "data:text/html,<script>alert(1)</script>"),
        ("nonsense", "pay me: now"),
    ];
    let mut dropped = Vec::new();
    for (name, link) in bad {
        dropped.push((insert_linked(&world, name, link).await, link));
    }
    let good = insert_linked(&world, "good", "https://pay.example.test/i/42?via=mail").await;

    let (code, stderr) = start_with(&world, &[]).await;

    assert_eq!(code, Some(0), "{stderr}");
    for (id, link) in &dropped {
        let mail = mail_for(&world, *id);
        let html = mail.html.clone().expect("an HTML part");
        assert_eq!(hrefs(&html), Vec::<String>::new(), "{link}: {html}");
        assert!(!unescape_html(&html).contains(link), "{link}: {html}");
        assert!(!mail.body.contains(link), "{link}: {}", mail.body);
        assert!(!mail.body.contains("Pay online"), "{}", mail.body);
        assert!(
            stderr.lines().any(|l| l.contains("WARN")
                && l.contains("payment_url")
                && l.contains(&format!("invoice_id={id} "))),
            "no warning naming invoice {id}: {stderr}"
        );
    }
    let mail = mail_for(&world, good);
    assert_eq!(
        hrefs(&mail.html.expect("an HTML part")),
        vec!["https://pay.example.test/i/42?via=mail".to_owned()]
    );
    assert!(
        mail.body
            .contains("Pay online: https://pay.example.test/i/42?via=mail")
    );
    assert!(!stderr.contains(&format!("invoice_id={good} ")), "{stderr}");
}

#[tokio::test]
async fn values_in_company_payment_url_are_percent_encoded_in_the_text_and_html_link() {
    let mut world = World::new().await;
    world.set(
        "company.payment_url",
        "https://pay.example.test/i/{{ invoice.number }}?who={{ customer.name }}",
    );
    let id = common::insert_invoice(world.pool(), "Ada & Co", "ada@example.test", 10, false).await;
    sqlx::query("UPDATE invoices SET number = 'INV 7/8?#&%' WHERE id = $1")
        .bind(id)
        .execute(world.pool())
        .await
        .unwrap();

    tick(&world).await;

    let expected = "https://pay.example.test/i/INV%207%2F8%3F%23%26%25?who=Ada%20%26%20Co";
    let mail = mail_for(&world, id);
    assert!(
        mail.body
            .lines()
            .any(|l| l.trim_end() == format!("Pay online: {expected}")),
        "{}",
        mail.body
    );
    assert_eq!(
        hrefs(&mail.html.expect("an HTML part")),
        vec![expected.to_owned()]
    );
}

#[tokio::test]
async fn a_company_payment_url_that_does_not_render_to_an_http_url_stops_start_up() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 1).await;
    for template in [
        "{{ invoice.number }}",
        "javascript:pay('{{ invoice.number }}')",
        "/pay/{{ invoice.number }}",
    ] {
        let (code, stderr) = start_with(
            &world,
            &[(
                "INVOICE_REMINDER__COMPANY__PAYMENT_URL",
                template.to_owned(),
            )],
        )
        .await;
        assert_eq!(code, Some(2), "{template}: {stderr}");
        assert!(
            stderr.contains("company.payment_url") && stderr.contains("http"),
            "{template}: {stderr}"
        );
    }
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test]
async fn english_reminders_start_the_sentence_after_the_salutation_with_a_capital() {
    let world = World::new().await;
    // One English invoice per built-in step: 3 days before due, 10 and 40 after.
    let mut ids = Vec::new();
    for (name, days) in [("Up", -3), ("Over", 10), ("Final", 40)] {
        ids.push(
            common::insert_invoice_in(world.pool(), name, Some("en"), days, 5_000, "EUR").await,
        );
    }
    tick(&world).await;
    for id in ids {
        let mail = mail_for(&world, id);
        let first_sentence = mail
            .body
            .lines()
            .skip_while(|l| !l.starts_with("Dear ") && !l.starts_with("Hello "))
            .skip(1)
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .to_owned();
        assert!(
            first_sentence.starts_with(char::is_uppercase),
            "step {:?}: the text body's first sentence starts in lower case: {first_sentence:?} in {:?}",
            mail.period(),
            mail.body
        );
        let html = mail.html.clone().unwrap_or_default();
        let after = html.split("</p>").nth(1).unwrap_or_default();
        let text = after.trim_start().trim_start_matches("<p>");
        assert!(
            text.starts_with(char::is_uppercase),
            "step {:?}: the HTML body's first sentence starts in lower case: {text:?}",
            mail.period()
        );
    }
}

#[tokio::test]
async fn lines_of_a_template_that_start_with_a_dot_arrive_as_written() {
    // SMTP ends a message at a line holding a lone "."; the sender doubles
    // a leading dot and the server strips it again.
    let dir = TemplateDir::new(&[
        ("en/overdue.subject.j2", "Dots\n"),
        (
            "en/overdue.txt.j2",
            "First line\n.\n..two dots\n.one dot {{ invoice.number }}\nlast\n",
        ),
    ]);
    let mut world = World::new().await;
    world.set("templates.dir", dir.path.display());
    let id = common::insert_invoice(world.pool(), "Dot", "dot@example.test", 10, false).await;

    tick(&world).await;

    let mail = mail_for(&world, id);
    let lines: Vec<&str> = mail.raw.split("\r\n").collect();
    for line in [".", "..two dots", "last"] {
        assert!(lines.contains(&line), "{line:?} in {:?}", mail.raw);
    }
    assert!(
        lines.iter().any(|l| l.starts_with(".one dot INV-")),
        "{:?}",
        mail.raw
    );
    let proof = invoice_reminder::db::archive::proof_of(
        &world.database(),
        &invoice_reminder::domain::InvoiceId::from(id),
        &"overdue".into(),
    )
    .await
    .unwrap()
    .expect("the reminder row");
    use sha2::Digest as _;
    assert_eq!(
        proof.message_sha256.as_deref(),
        Some(
            sha2::Sha256::digest(mail.raw.as_bytes())
                .to_vec()
                .as_slice()
        ),
        "the server received the bytes that were hashed"
    );
}
