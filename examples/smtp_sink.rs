//! A local SMTP sink for the demo without Docker: accepts every message on
//! 127.0.0.1:1025 (or the port given) and prints one line per reminder,
//! flagging any (invoice, period) received twice.
//!
//! `cargo run --example smtp_sink -- 1025`

#[allow(dead_code)]
#[path = "../tests/common/smtp.rs"]
mod smtp;

use std::collections::HashMap;
use std::time::Duration;

fn main() {
    let port = std::env::args().nth(1).unwrap_or_else(|| "1025".to_owned());
    let sink = smtp::SmtpSink::start_on(&format!("127.0.0.1:{port}"));
    println!("smtp sink listening on {}", sink.addr);
    let mut seen: HashMap<(Option<i64>, Option<String>), u32> = HashMap::new();
    let (mut printed, mut duplicates) = (0, 0);
    loop {
        let received = sink.received();
        let fresh = &received[printed..];
        for mail in fresh {
            let (invoice, period) = (mail.invoice_id(), mail.period());
            let copies = seen.entry((invoice, period.clone())).or_insert(0);
            *copies += 1;
            if *copies > 1 {
                duplicates += 1;
            }
            printed += 1;
            println!(
                "received #{printed} invoice {} period {} to {}{}",
                invoice.map_or_else(|| "?".into(), |i| i.to_string()),
                period.as_deref().unwrap_or("?"),
                mail.to.join(","),
                if *copies > 1 { "  DUPLICATE" } else { "" }
            );
        }
        if !fresh.is_empty() {
            println!("total {printed} message(s), {duplicates} duplicate(s)");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
