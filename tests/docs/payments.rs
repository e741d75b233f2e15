//! docs/own-invoices.md's `curl` example of a generic payment signal, run
//! as written (only the port changed) against a real worker configured
//! with the guide's example secret: it is stored and holds invoice 42.

use super::{blocks, common, listening_worker, page, repo};

const GUIDE: &str = "docs/own-invoices.md";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payment_signal_curl_example_is_stored_by_a_real_worker_and_holds_its_invoice() {
    let examples: Vec<String> = blocks(GUIDE, "sh")
        .into_iter()
        .filter(|b| b.contains("curl") && b.contains("/webhooks/payments"))
        .collect();
    assert_eq!(examples.len(), 1, "the signed example");
    let text = page(GUIDE);
    let secret = text
        .split('\'')
        .find(|s| s.starts_with("whsec_"))
        .expect("the guide's example secret")
        .to_owned();
    let world = common::World::new().await;
    let (mut worker, port) =
        listening_worker(&world, &[("INVOICE_REMINDER__PAYMENTS__SECRET", &secret)]).await;

    let script = examples[0].replace("127.0.0.1:9464", &format!("127.0.0.1:{port}"));
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -eu\n{script}"))
        .current_dir(repo())
        .output()
        .await
        .expect("run bash");
    let held: Vec<(String, String)> = sqlx::query_as("SELECT invoice_id, state FROM payment_holds")
        .fetch_all(world.pool())
        .await
        .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();

    let answer = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{answer} {:?}", out.stderr);
    assert!(answer.contains(r#""outcome":"stored""#), "{answer}");
    assert_eq!(held, vec![("42".to_owned(), "pending".to_owned())]);
}
