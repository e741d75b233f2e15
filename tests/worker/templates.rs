//! What customers read: templates per language, money and dates in their
//! locale, HTML that cannot be injected into, the user's own templates,
//! and `preview`. Broken templates stop start-up.

use std::path::PathBuf;

use invoice_reminder::tick::run_tick;
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

fn mail_for(world: &World, invoice: i64) -> common::smtp::Received {
    world
        .sink
        .received()
        .into_iter()
        .find(|m| m.invoice_id() == Some(invoice))
        .unwrap_or_else(|| panic!("no mail for invoice {invoice}"))
}

/// A templates directory of the test's own, removed on drop.
struct TemplateDir {
    path: PathBuf,
}

impl TemplateDir {
    fn new(files: &[(&str, &str)]) -> Self {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("templates-{}", uuid::Uuid::new_v4().simple()));
        for (name, source) in files {
            let file = path.join(name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, source).unwrap();
        }
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }
}

impl Drop for TemplateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
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
async fn start_with(world: &World, env: &[(&str, String)]) -> (Option<i32>, String) {
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
