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
        amount: crate::domain::Amount::Minor(123_456),
        currency: "EUR".into(),
        due_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 20).unwrap_or_default(),
        payment_url: None,
    }
}

fn customer(name: &str, email: &str) -> Customer {
    Customer {
        name: name.into(),
        email: email.into(),
        locale: None,
        id: None,
    }
}

fn rendered(html: Option<&str>) -> Rendered {
    Rendered {
        subject: "Reminder".into(),
        text: "Pay, please.".into(),
        html: html.map(str::to_owned),
    }
}

fn build(name: &str, email: &str, html: Option<&str>) -> Result<OutgoingMail, MessageError> {
    build_message(
        &smtp(),
        None,
        &invoice(),
        &customer(name, email),
        "overdue",
        message_id(&invoice().id, "overdue", "mail.test"),
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
fn an_invalid_address_names_the_invoice() {
    let err = build("X", "nope", None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("invoice 42") && err.contains("address"),
        "{err}"
    );
}

#[test]
fn an_email_cell_may_hold_several_addresses_each_checked_and_repeats_dropped() {
    let to = |cell: &str| {
        parse_recipients(cell).map(|a| a.iter().map(ToString::to_string).collect::<Vec<_>>())
    };
    assert_eq!(
        to("a@x.test, b@x.test,A@X.TEST, ,"),
        Ok(vec!["a@x.test".to_owned(), "b@x.test".to_owned()])
    );
    assert!(to("a@x.test, nope").is_err_and(|e| e.contains("nope")));
    assert!(to(" , ").is_err());
    let mail = build("Ada", "ada@example.test, bob@example.test", None)
        .map(|m| String::from_utf8_lossy(m.formatted()).into_owned())
        .unwrap_or_default();
    assert!(
        mail.contains("To: Ada <ada@example.test>, Ada <bob@example.test>\r\n"),
        "{mail}"
    );
}
