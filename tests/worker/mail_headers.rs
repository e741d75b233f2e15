//! The headers every reminder carries, read at the SMTP server: the thread
//! (`In-Reply-To`, `References`), `Auto-Submitted`, and the DKIM signature,
//! verified by an independent verifier (stalwart's `mail-auth`) against the
//! record `invoice-reminder dkim-record` prints, served by a resolver of
//! the test's own (no network).
//!
//! The keys in tests/fixtures/dkim/ are throwaway test keys, generated with
//! `openssl genrsa -traditional 2048`, `openssl genrsa 1024` (too small, on
//! purpose) and `openssl genpkey -algorithm ed25519`; never use them for
//! real mail.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use invoice_reminder::tick::run_tick;
use mail_auth::common::parse::TxtRecordParser as _;
use mail_auth::common::verify::DomainKey;
use mail_auth::{
    AuthenticatedMessage, DkimResult, MessageAuthenticator, Parameters, ResolverCache, Txt,
};
use tokio_util::sync::CancellationToken;

use crate::common::{self, World};

async fn tick(world: &World) {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap();
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dkim")
        .join(name)
}

/// A Message-ID header's value without its angle brackets.
fn bare(id: &str) -> String {
    id.trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned()
}

#[tokio::test]
async fn each_later_reminder_replies_to_the_one_before_and_references_all_earlier_oldest_first() {
    let mut world = World::new().await;
    world.set("reminders.min_days_between", 0);
    // 3 days overdue: the `overdue` step.
    common::insert_invoice(world.pool(), "Ada", "ada@example.test", 3, false).await;
    tick(&world).await;
    // 21 days: `final`; 35 days: `final-2`.
    common::age_invoices(world.pool(), 18).await;
    tick(&world).await;
    common::age_invoices(world.pool(), 14).await;
    tick(&world).await;

    let mails = world.sink.received();
    let periods: Vec<_> = mails.iter().filter_map(|m| m.period()).collect();
    assert_eq!(periods, ["overdue", "final", "final-2"]);
    let ids: Vec<String> = mails
        .iter()
        .map(|m| bare(m.header("Message-ID").unwrap_or_default()))
        .collect();
    assert_eq!(mails[0].header("In-Reply-To"), None);
    assert_eq!(mails[0].header("References"), None);
    assert_eq!(
        mails[1].header("In-Reply-To"),
        Some(format!("<{}>", ids[0]).as_str())
    );
    assert_eq!(
        mails[1].header("References"),
        Some(format!("<{}>", ids[0]).as_str())
    );
    assert_eq!(
        mails[2].header("In-Reply-To"),
        Some(format!("<{}>", ids[1]).as_str())
    );
    assert_eq!(
        mails[2].header("References"),
        Some(format!("<{}> <{}>", ids[0], ids[1]).as_str())
    );
}

#[tokio::test]
async fn each_invoice_of_one_claim_continues_its_own_thread() {
    let mut world = World::new().await;
    world.set("reminders.min_days_between", 0);
    // Three invoices, claimed in one statement at each step.
    for name in ["Ada", "Bea", "Cy"] {
        let email = format!("{}@example.test", name.to_lowercase());
        common::insert_invoice(world.pool(), name, &email, 3, false).await;
    }
    tick(&world).await;
    common::age_invoices(world.pool(), 18).await;
    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 6, "two reminders for each of three invoices");
    let first: HashMap<i64, String> = mails
        .iter()
        .filter(|m| m.period().as_deref() == Some("overdue"))
        .filter_map(|m| Some((m.invoice_id()?, bare(m.header("Message-ID")?))))
        .collect();
    assert_eq!(first.len(), 3);
    for later in mails
        .iter()
        .filter(|m| m.period().as_deref() == Some("final"))
    {
        let invoice = later.invoice_id().unwrap_or_default();
        let expected = first.get(&invoice).map(|id| format!("<{id}>"));
        assert_eq!(
            later.header("In-Reply-To"),
            expected.as_deref(),
            "invoice {invoice}'s second reminder replies to its first, whatever its place in the claim"
        );
    }
}

#[tokio::test]
async fn every_reminder_says_it_was_auto_generated() {
    let world = World::new().await;
    common::insert_overdue(world.pool(), 3).await;
    tick(&world).await;

    let mails = world.sink.received();
    assert_eq!(mails.len(), 3);
    for mail in &mails {
        assert_eq!(mail.header("Auto-Submitted"), Some("auto-generated"));
    }
}

/// A TXT "DNS" of the test's own: the verifier finds the key here and
/// never asks the network.
#[derive(Default)]
struct TestDns(Mutex<HashMap<String, Txt>>);

impl ResolverCache<String, Txt> for TestDns {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().get(name).cloned()
    }

    fn remove<Q>(&self, name: &Q) -> Option<Txt>
    where
        String: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().remove(name)
    }

    fn insert(&self, key: String, value: Txt, _: Instant) {
        self.0.lock().unwrap().insert(key, value);
    }
}

impl TestDns {
    /// Publishes a zone file line as `dkim-record` prints it:
    /// `name TXT "part" "part"`.
    fn publish(&self, line: &str) {
        let (name, rest) = line.split_once(" TXT ").expect("a TXT record line");
        let value: String = rest
            .split('"')
            .skip(1)
            .step_by(2)
            .collect::<Vec<_>>()
            .concat();
        for name in [name.to_owned(), format!("{name}.")] {
            let key = DomainKey::parse(value.as_bytes()).expect("the record parses as a DKIM key");
            self.insert(
                name,
                Txt::from(key),
                Instant::now() + Duration::from_secs(3600),
            );
        }
    }
}

async fn verify(dns: &TestDns, raw: &[u8]) -> Vec<DkimResult> {
    let message = AuthenticatedMessage::parse(raw).expect("the message parses");
    let verifier = MessageAuthenticator::new_cloudflare().expect("a verifier");
    verifier
        .verify_dkim(Parameters::new(&message).with_txt_cache(dns))
        .await
        .iter()
        .map(|o| o.result().clone())
        .collect()
}

/// Sends one reminder signed with `key_file`, publishes the record
/// `dkim-record` prints for it, and checks the signature passes as
/// received and fails once a signed header is changed.
async fn a_reminder_signed_with(key_file: &str, algorithm: &str) {
    let mut world = World::new().await;
    world
        .set("smtp.dkim.domain", "example.com")
        .set("smtp.dkim.selector", "reminders")
        .set("smtp.dkim.private_key_file", fixture(key_file).display());
    common::insert_overdue(world.pool(), 1).await;
    tick(&world).await;
    let out = common::cli(&world, &["dkim-record"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record = common::stdout(&out);
    assert!(
        record.starts_with(&format!(
            "reminders._domainkey.example.com TXT \"v=DKIM1; k={algorithm}; p="
        )),
        "{record}"
    );
    let dns = TestDns::default();
    dns.publish(record.trim());

    let mails = world.sink.received();
    assert_eq!(mails.len(), 1);
    let mail = &mails[0];
    let signature = mail.header("DKIM-Signature").unwrap_or_default();
    assert!(
        signature.contains(&format!("a={algorithm}-sha256")),
        "{signature}"
    );
    for header in [
        "from",
        "to",
        "subject",
        "date",
        "message-id",
        "auto-submitted",
        "content-type",
        "x-invoice-id",
    ] {
        assert!(
            signature.to_ascii_lowercase().contains(header),
            "{header} is not signed: {signature}"
        );
    }
    assert_eq!(
        verify(&dns, mail.raw.as_bytes()).await,
        vec![DkimResult::Pass]
    );

    let subject = format!("Subject: {}", mail.header("Subject").unwrap_or_default());
    assert!(mail.raw.contains(&subject), "{}", mail.raw);
    let tampered = mail
        .raw
        .replacen(&subject, "Subject: Pay now to another account", 1);
    let results = verify(&dns, tampered.as_bytes()).await;
    assert!(
        matches!(results.as_slice(), [DkimResult::Fail(_)]),
        "a changed Subject must fail: {results:?}"
    );
}

#[tokio::test]
async fn a_reminder_signed_with_an_rsa_key_verifies_against_the_printed_record_until_a_signed_header_changes()
 {
    a_reminder_signed_with("rsa2048.pem", "rsa").await;
}

#[tokio::test]
async fn a_reminder_signed_with_an_ed25519_key_verifies_against_the_printed_record_until_a_signed_header_changes()
 {
    a_reminder_signed_with("ed25519.pem", "ed25519").await;
}

#[tokio::test]
async fn a_missing_unreadable_too_small_or_incomplete_dkim_key_exits_2_naming_the_key() {
    let missing = fixture("no-such-key.pem");
    let garbage = std::env::temp_dir().join(format!("ir-dkim-garbage-{}.pem", std::process::id()));
    std::fs::write(&garbage, "not a key").unwrap();
    for (file, says) in [
        (Some(missing.display().to_string()), "cannot read"),
        (
            Some(garbage.display().to_string()),
            "not an RSA or Ed25519 private key",
        ),
        (
            Some(fixture("rsa1024.pem").display().to_string()),
            "1024 bits",
        ),
        (None, "missing"),
    ] {
        let mut world = World::new().await;
        world
            .set("smtp.dkim.domain", "example.com")
            .set("smtp.dkim.selector", "reminders");
        if let Some(file) = &file {
            world.set("smtp.dkim.private_key_file", file);
        }
        let out = common::cli(&world, &["dkim-record"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file:?}: {stderr}");
        assert!(
            stderr.contains("smtp.dkim.private_key_file") && stderr.contains(says),
            "{file:?}: {stderr}"
        );
    }
    let _ = std::fs::remove_file(garbage);
}
