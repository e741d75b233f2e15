//! The message builder's own checks: headers, threading, ids, recipients.

use super::*;

fn smtp() -> SmtpSettings {
    crate::config::Settings::load(&crate::config::ConfigSource {
        path: None,
        env: vec![(
            "INVOICE_REMINDER__SMTP__MESSAGE_ID_DOMAIN".into(),
            "mail.test".into(),
        )],
    })
    .map(|s| s.smtp)
    .unwrap_or_else(|e| panic!("default settings: {e}"))
}

fn invoice() -> Invoice {
    Invoice {
        id: InvoiceId("42".into()),
        number: "INV-7".into(),
        amount: crate::domain::Money::from_minor(
            123_456,
            crate::domain::Currency::parse("EUR").unwrap_or_else(|e| panic!("{e}")),
        ),
        due_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 20).unwrap_or_default(),
        payment_url: None,
        late_payment_regime: None,
    }
}

fn customer(name: &str, email: &str) -> Customer {
    Customer {
        name: name.into(),
        email: crate::domain::Recipients::parse(email).unwrap_or_else(|e| panic!("{e}")),
        locale: None,
        id: None,
        timezone: None,
        holiday_calendar: None,
    }
}

fn rendered(html: Option<&str>) -> Rendered {
    Rendered {
        subject: "Reminder".into(),
        text: "Pay, please.".into(),
        html: html.map(str::to_owned),
        attachments: Vec::new(),
    }
}

fn build(name: &str, email: &str, html: Option<&str>) -> Result<OutgoingMail, MessageError> {
    build_message(
        &smtp(),
        None,
        &invoice(),
        &customer(name, email),
        &"overdue".into(),
        message_id(&invoice().id, &"overdue".into(), "mail.test"),
        &[],
        rendered(html),
    )
}

#[test]
fn references_keep_the_root_and_the_latest_when_there_are_too_many() {
    let ids: Vec<String> = (1..=15).map(|i| format!("m{i}")).collect();
    let kept = bounded_references(&ids);
    assert_eq!(kept.len(), MAX_REFERENCES);
    assert_eq!(kept.first(), Some(&"m1"));
    assert_eq!(kept.get(1), Some(&"m7"));
    assert_eq!(kept.last(), Some(&"m15"));
    assert_eq!(bounded_references(&ids[..3]), vec!["m1", "m2", "m3"]);
}

#[test]
fn the_same_reminder_always_gets_the_same_message_id() {
    let a = build("Ada", "ada@example.test", None).map(|m| m.message_id);
    let b = build("Ada", "ada@example.test", None).map(|m| m.message_id);
    assert_eq!(a.as_deref().ok(), Some("invoice-42.overdue@mail.test"));
    assert_eq!(a.ok(), b.ok());
}

#[test]
fn the_message_carries_the_invoice_and_no_injected_header() {
    let mail = build("Eve\r\nBcc: all@evil.test", "eve@example.test", None)
        .map(|m| String::from_utf8_lossy(m.formatted()).into_owned())
        .unwrap_or_default();
    assert!(mail.contains("X-Invoice-Id: 42\r\n"), "{mail}");
    assert!(mail.contains("X-Reminder-Period: overdue\r\n"), "{mail}");
    assert!(
        mail.contains("Message-ID: <invoice-42.overdue@mail.test>"),
        "{mail}"
    );
    assert!(!mail.contains("\r\nBcc:"), "{mail}");
    assert!(mail.contains("Content-Type: text/plain"), "{mail}");
}

#[test]
fn an_html_part_makes_it_multipart_alternative_text_first() {
    let mail = build("Ada", "ada@example.test", Some("<p>Pay</p>"))
        .map(|m| String::from_utf8_lossy(m.formatted()).into_owned())
        .unwrap_or_default();
    assert!(mail.contains("multipart/alternative"), "{mail}");
    let (text, html) = (mail.find("text/plain"), mail.find("text/html"));
    assert!(text.is_some() && html.is_some() && text < html, "{mail}");
}

#[test]
fn a_message_goes_to_every_address_of_the_cell_under_the_customers_name() {
    let mail = build("Ada", "ada@example.test, bob@example.test", None)
        .map(|m| String::from_utf8_lossy(m.formatted()).into_owned())
        .unwrap_or_default();
    assert!(
        mail.contains("To: Ada <ada@example.test>, Ada <bob@example.test>\r\n"),
        "{mail}"
    );
}
