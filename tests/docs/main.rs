//! The docs' promises that code can check (README.md and docs/*.md, each
//! claim on the page a reader looks for it): the alert rules shown are the
//! file CI tests with promtool, the metrics listed are the ones the process
//! exposes, the probes suggested ask endpoints that exist, the SQL and the
//! examples run; and every relative link and `#anchor` resolves.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

#[path = "../common/mod.rs"]
#[allow(unused_imports)]
mod common;

use invoice_reminder::config::{ConfigSource, Settings};
use invoice_reminder::domain::Counts;
use invoice_reminder::metrics::Metrics;

mod layout;
mod payments;
mod send_window;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of one page, by its path in the repository.
fn page(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const WRITING: &str = "docs/writing-reminders.md";
const OWN_INVOICES: &str = "docs/own-invoices.md";
const OPERATING: &str = "docs/operating.md";
const CONFIGURATION: &str = "docs/configuration.md";

#[test]
fn the_alert_rules_in_the_operating_guide_are_the_file_ci_checks_with_promtool() {
    let file = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    assert!(
        blocks(OPERATING, "yaml").contains(&file),
        "docs/operating.md must show deploy/prometheus/alerts.yml verbatim in a ```yaml block"
    );
}

#[test]
fn the_metrics_table_lists_exactly_what_the_process_exposes() {
    let metrics = Metrics::default();
    // Touch every family so each is exposed with at least one sample.
    metrics.tick_ended("done");
    metrics.tick_worked(&Counts::default(), Duration::from_millis(1), true);
    metrics.lock_acquisition("acquired");
    metrics.source_problems("repeated_key", 1);
    metrics.webhook_request("accepted");
    metrics.payment_signal("paid", "stored");
    metrics.stripe_lookup("linked");
    metrics.send_waits(&invoice_reminder::domain::Waits::default());
    metrics.http_listener_full("replaced");
    metrics
        .lock_renewals()
        .get_or_create(&invoice_reminder::metrics::ResultLabel { result: "renewed" })
        .inc();
    let text = metrics.encode().unwrap();
    let exposed: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            }
        })
        .collect();
    let text = page(OPERATING);
    let listed: BTreeSet<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("| metric | type | labels | meaning |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('`').nth(1).unwrap().to_owned())
        .collect();

    assert_eq!(
        listed, exposed,
        "docs/operating.md metrics table vs /metrics"
    );
    for name in [
        "invoice_reminder_ticks_total",
        "invoice_reminder_reminders_total",
        "invoice_reminder_tick_duration_seconds",
        "invoice_reminder_lock_held",
        "invoice_reminder_last_success_timestamp_seconds",
    ] {
        assert!(exposed.contains(name), "contract metric {name} is missing");
    }
}

#[test]
fn the_kubernetes_probes_ask_the_endpoints_on_the_docker_port() {
    let blocks = blocks(OPERATING, "yaml");
    let probes = blocks
        .iter()
        .find(|b| b.contains("livenessProbe"))
        .expect("docs/operating.md shows Kubernetes probes");
    let probes: serde_norway::Value = serde_norway::from_str(probes).unwrap();
    let docker = Settings::load(&ConfigSource {
        path: Some(repo().join("config/docker.toml")),
        env: vec![],
    })
    .unwrap();
    let port = docker.http.listen.unwrap().port();

    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &probes[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        assert_eq!(get["port"].as_u64(), Some(u64::from(port)), "{probe}");
    }
}

#[test]
fn the_operating_guides_scrape_snippet_is_the_demo_prometheus_configuration() {
    let blocks = blocks(OPERATING, "yaml");
    let snippet = blocks
        .iter()
        .find(|b| b.starts_with("scrape_configs:"))
        .expect("docs/operating.md shows the scrape configuration");
    let snippet: serde_norway::Value = serde_norway::from_str(snippet).unwrap();
    let file: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(repo().join("deploy/prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    assert_eq!(snippet["scrape_configs"], file["scrape_configs"]);
}

/// The fenced blocks of `lang` on the page at `path`, in order.
fn blocks(path: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page(path).lines() {
        match (&mut current, line.trim_end()) {
            (None, l) if l == open => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn the_stages_shown_in_the_reminders_guide_are_the_defaults() {
    let shown = blocks(WRITING, "toml")
        .into_iter()
        .find(|b| b.contains("[[reminders.stages]]"))
        .expect("docs/writing-reminders.md shows the default stages");
    let shown: toml::Table = shown.parse().unwrap();
    let defaults: toml::Table = invoice_reminder::config::DEFAULTS.parse().unwrap();
    assert_eq!(
        shown["reminders"]["stages"], defaults["reminders"]["stages"],
        "docs/writing-reminders.md's stages vs config/default.toml"
    );
}

/// The variables the table under `header` names (first column, in
/// backticks), on `text`.
fn listed_variables(text: &str, header: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            l.split('|')
                .nth(1)
                .unwrap_or_default()
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Loads the templates with `templates` (each named file using every one
/// of `listed`) over the built-in ones. Loading renders every template
/// against a sample and rendering is strict, so a listed variable the code
/// lacks fails it.
fn load_using_every(listed: &[String], templates: &[&str]) -> Result<(), String> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("docs-vars-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(dir.join("en")).unwrap();
    let body: String = listed.iter().map(|v| format!("{{{{ {v} }}}}\n")).collect();
    for name in templates {
        std::fs::write(dir.join(format!("en/{name}.subject.j2")), "s").unwrap();
        std::fs::write(dir.join(format!("en/{name}.txt.j2")), &body).unwrap();
    }
    let settings = Settings::load(&ConfigSource {
        path: None,
        env: vec![(
            "INVOICE_REMINDER__TEMPLATES__DIR".into(),
            dir.display().to_string(),
        )],
    })
    .unwrap();
    let loaded = invoice_reminder::mail::Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    );
    let _ = std::fs::remove_dir_all(&dir);
    loaded.map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn every_template_variable_the_reminders_guide_lists_exists() {
    let listed = listed_variables(&page(WRITING), "| variable | meaning |");
    assert!(listed.len() >= 15, "{listed:?}");
    let loaded = load_using_every(&listed, &["upcoming", "overdue", "final"]);
    assert!(loaded.is_ok(), "{loaded:?}");
}

/// The operating guide's SQL statement that follows the comment starting `comment`.
fn operating_query(comment: &str) -> String {
    let sql = blocks(OPERATING, "sql").join("\n");
    let start = sql
        .find(comment)
        .unwrap_or_else(|| panic!("no docs/operating.md query after {comment:?}"));
    let rest = &sql[start..];
    let body: String = rest
        .lines()
        .skip_while(|l| l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    body.split(';').next().unwrap_or_default().trim().to_owned()
}

#[tokio::test]
async fn the_operator_queries_end_a_killed_run_with_its_lease_and_skip_rows_never_started() {
    let db = common::TestDb::create().await;
    let pool = &db.pool;
    let invoices = common::insert_overdue(pool, 3).await;
    // Run 1 was killed (never finished; its lease ran out 58 s ago); run 2
    // started after that; run 3 overlapped run 2.
    let runs: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job_runs (replica_id, run_date, started_at, finished_at, lease_until)
         VALUES ('killed', '2026-11-30', now() - interval '60 s', NULL, now() - interval '58 s'),
                ('b', '2026-11-30', now() - interval '50 s', now() - interval '40 s', now() - interval '40 s'),
                ('c', '2026-11-30', now() - interval '45 s', now() - interval '30 s', now() - interval '30 s')
         RETURNING id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    // The killed run started one row and never started the other; a third
    // row's run was pruned (run_id cleared).
    sqlx::query(
        "INSERT INTO reminders (invoice_id, period, status, run_id, started_at)
         VALUES ($1, 'overdue', 'sending', $3, now() - interval '59 s'),
                ($2, 'overdue', 'sending', $3, NULL),
                ($4, 'overdue', 'sending', NULL, now() - interval '59 s')",
    )
    .bind(invoices[0])
    .bind(invoices[1])
    .bind(runs[0])
    .bind(invoices[2])
    .execute(pool)
    .await
    .unwrap();

    let overlaps: Vec<(i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(operating_query(
        "-- Did two ticks ever run at once?",
    )))
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(overlaps, vec![(runs[1], runs[2])]);
    let worker = invoice_reminder::db::runs::overlapping_runs(&invoice_reminder::db::Db::plain(
        pool.clone(),
    ))
    .await
    .unwrap();
    assert_eq!(
        worker, overlaps,
        "the docs' query is the one the worker uses"
    );

    let unknown: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT invoice_id::bigint FROM ({}) u ORDER BY 1",
        operating_query("-- Unknown deliveries")
    )))
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(unknown, vec![invoices[0], invoices[2]]);
}

/// The source contract table: (column, listed types).
fn contract_table() -> Vec<(String, Vec<String>)> {
    page(OWN_INVOICES)
        .lines()
        .skip_while(|l| !l.starts_with("| column | type | meaning |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`').to_owned();
            let types = cells[2]
                .split(", ")
                .filter(|t| *t != "nullable")
                .map(|t| if t == "char(3)" { "character" } else { t })
                .map(|t| {
                    if t == "varchar" {
                        "character varying"
                    } else {
                        t
                    }
                })
                .map(str::to_owned)
                .collect();
            (name, types)
        })
        .collect()
}

#[test]
fn the_documented_source_contract_is_the_one_the_worker_checks() {
    use invoice_reminder::db::source::{AMOUNT_COLUMNS, CONTRACT};
    let table = contract_table();
    let listed: BTreeSet<&str> = table.iter().map(|(n, _)| n.as_str()).collect();
    let checked: BTreeSet<&str> = CONTRACT
        .iter()
        .chain(AMOUNT_COLUMNS)
        .map(|c| c.name)
        .collect();
    assert_eq!(listed, checked);
    for (name, types) in &table {
        let column = CONTRACT
            .iter()
            .chain(AMOUNT_COLUMNS)
            .find(|c| c.name == name)
            .unwrap();
        for t in types {
            assert!(
                column.types.contains(&t.as_str()),
                "{name}: docs/own-invoices.md lists {t}, the check refuses it"
            );
        }
    }
}

#[tokio::test]
async fn the_example_views_pass_the_source_check() {
    let examples: Vec<String> = blocks(OWN_INVOICES, "sql")
        .into_iter()
        .filter(|b| b.contains("CREATE VIEW") || b.contains("CREATE OR REPLACE VIEW"))
        .collect();
    assert_eq!(
        examples.len(),
        3,
        "the contacts (string_agg), the Rails-style and the UUID example"
    );
    let uuid = examples
        .iter()
        .find(|e| e.contains("CREATE VIEW billing.reminder_invoices"))
        .cloned()
        .unwrap();
    for example in &examples {
        let relation = if example.contains("public.billing_reminders") {
            "public.billing_reminders"
        } else {
            "billing.reminder_invoices"
        };
        assert!(example.contains(relation), "{example}");
        // The contacts example builds on the UUID example's tables.
        let example = if example.contains("string_agg") {
            format!("{uuid}\n{example}")
        } else {
            example.clone()
        };
        let db = common::TestDb::create().await;
        // As a user's session would run it: their own search_path.
        let mut conn = db.pool.acquire().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SET search_path TO public; {example}"
        )))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{relation}: {e}"));
        drop(conn);
        let settings = Settings::load(&ConfigSource {
            path: None,
            env: vec![("INVOICE_REMINDER__SOURCE__RELATION".into(), relation.into())],
        })
        .unwrap();
        let database = invoice_reminder::db::Db::new(db.pool.clone(), &settings);
        invoice_reminder::db::source::check(&database)
            .await
            .unwrap_or_else(|e| panic!("{relation}: {e}"));
    }
}

/// Every example of `company.payment_url` in the docs and in
/// `config/default.toml`: the `http...{{ ... }}` quoted within three lines
/// of one that names `payment_url`.
fn payment_url_examples() -> Vec<String> {
    let text = [CONFIGURATION, WRITING, "config/default.toml"]
        .map(page)
        .join("\n");
    let lines: Vec<&str> = text.lines().collect();
    let mut examples = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // The example may sit in a comment a few lines from the key.
        let near = &lines[i.saturating_sub(3)..(i + 4).min(lines.len())];
        if !near.iter().any(|l| l.contains("payment_url")) {
            continue;
        }
        for quote in ['`', '"'] {
            examples.extend(
                line.split(quote)
                    .skip(1)
                    .step_by(2)
                    .filter(|s| s.starts_with("http") && s.contains("{{"))
                    .map(str::to_owned),
            );
        }
    }
    examples
}

#[test]
fn every_payment_url_example_links_to_the_invoice_with_its_number_percent_encoded() {
    let examples = payment_url_examples();
    // The key table (configuration.md), "Payment links" (writing-reminders.md),
    // and default.toml's comment.
    assert!(
        examples.len() >= 3,
        "company.payment_url examples: {examples:?}"
    );
    let number = "INV 7/8?#";
    for example in examples {
        let settings = Settings::load(&ConfigSource {
            path: None,
            env: vec![(
                "INVOICE_REMINDER__COMPANY__PAYMENT_URL".into(),
                example.clone(),
            )],
        })
        .unwrap();
        let stages = &settings.reminders.stages;
        let templates = invoice_reminder::mail::Templates::load(
            &settings.templates,
            &settings.company,
            &settings.late_payment,
            stages,
        )
        .unwrap_or_else(|e| panic!("{example}: {e}"));
        let step = stages.steps().iter().find(|s| s.key == "overdue").unwrap();
        let today = chrono::NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
        let invoice = invoice_reminder::domain::Invoice {
            id: invoice_reminder::domain::InvoiceId("42".into()),
            number: number.into(),
            amount: invoice_reminder::domain::Money::from_minor(
                1000,
                invoice_reminder::domain::Currency::parse("EUR").unwrap(),
            ),
            due_date: today - chrono::Days::new(10),
            payment_url: None,
            late_payment_regime: None,
        };
        let customer = invoice_reminder::domain::Customer {
            name: "Ada".into(),
            email: invoice_reminder::domain::Recipients::parse("ada@example.com").unwrap(),
            locale: None,
            id: None,
            timezone: None,
            holiday_calendar: None,
        };
        let rendered = templates
            .render(stages.stage(step), step, &invoice, &customer, today)
            .unwrap();
        let link = rendered
            .text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Pay online: "))
            .unwrap_or_else(|| panic!("{example}: no link in {}", rendered.text));
        let url = url::Url::parse(link).unwrap_or_else(|e| panic!("{example} -> {link}: {e}"));
        assert_eq!(url.scheme(), "https", "{example} -> {link}");
        assert!(
            link.contains("INV%207%2F8%3F%23") && !link.contains(number),
            "{example} -> {link}: the number is not percent-encoded"
        );
        assert_eq!(url.fragment(), None, "{example} -> {link}");
    }
}

#[test]
fn every_statement_variable_the_reminders_guide_lists_exists() {
    let listed = listed_variables(&page(WRITING), "| statement variable | meaning |");
    assert!(listed.len() >= 20, "{listed:?}");
    let loaded = load_using_every(&listed, &["statement"]);
    assert!(loaded.is_ok(), "{loaded:?}");
}

/// A `run` worker for `world` whose schedule does not fire during a test,
/// serving `http.listen` on a free port, with `env` besides; once it
/// listens.
async fn listening_worker(
    world: &common::World,
    env: &[(&str, &str)],
) -> (std::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_invoice-reminder"))
        .arg("--config")
        .arg(common::default_config_path())
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(world.env())
        .env("INVOICE_REMINDER__SCHEDULE__CRON", "0 0 0 1 1 *")
        .env(
            "INVOICE_REMINDER__HTTP__LISTEN",
            format!("127.0.0.1:{port}"),
        )
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the worker");
    common::wait_until("the worker listens", Duration::from_secs(20), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    (worker, port)
}

/// The operating guide's `curl` examples for the bounce webhook, run as
/// written (only the port changed) against a real worker configured as the
/// guide says: both must be accepted and suppress their address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bounce_webhook_curl_examples_are_accepted_by_a_real_worker() {
    let examples: Vec<String> = blocks(OPERATING, "sh")
        .into_iter()
        .filter(|b| b.contains("curl") && b.contains("/webhooks/bounces"))
        .collect();
    assert_eq!(examples.len(), 2, "the signed and the Postmark example");
    let text = page(OPERATING);
    let secret = text
        .split('\'')
        .find(|s| s.starts_with("whsec_"))
        .expect("the operating guide's example secret")
        .to_owned();
    let world = common::World::new().await;
    let (mut worker, port) = listening_worker(
        &world,
        &[
            ("INVOICE_REMINDER__HTTP__WEBHOOK_SECRET", &secret),
            (
                "INVOICE_REMINDER__HTTP__WEBHOOK_BASIC_AUTH",
                "postmark:change-me",
            ),
        ],
    )
    .await;

    let mut answers = Vec::new();
    for example in &examples {
        let script = example.replace("127.0.0.1:9464", &format!("127.0.0.1:{port}"));
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -eu\n{script}"))
            .current_dir(repo())
            .output()
            .await
            .expect("run bash");
        answers.push((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    let suppressed: Vec<(String, String)> =
        sqlx::query_as("SELECT address, source FROM suppressions ORDER BY address")
            .fetch_all(world.pool())
            .await
            .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();

    for answer in &answers {
        assert_eq!(answer.0, Some(0), "{answer:?}");
        assert!(answer.1.contains(r#""outcome":"accepted""#), "{answer:?}");
    }
    assert_eq!(
        suppressed,
        vec![
            ("ada@example.com".to_owned(), "webhook".to_owned()),
            ("john@example.com".to_owned(), "postmark".to_owned()),
        ]
    );
}

/// README.md, then every page in docs/, as (path in the repository, text).
fn pages() -> Vec<(String, String)> {
    let mut paths = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths.into_iter().map(|p| (p.clone(), page(&p))).collect()
}

fn markdown(text: &str) -> pulldown_cmark::Parser<'_> {
    pulldown_cmark::Parser::new_ext(text, pulldown_cmark::Options::ENABLE_TABLES)
}

/// Every link and image target on a page, as written.
fn link_targets(text: &str) -> Vec<String> {
    use pulldown_cmark::{Event, Tag};
    markdown(text)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.into_string())
            }
            _ => None,
        })
        .collect()
}

/// The anchors GitHub gives a page's headings: the heading's text in lower
/// case, without punctuation, spaces as `-`; a repeated slug gets `-1`,
/// `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    use pulldown_cmark::{Event, Tag, TagEnd};
    let mut anchors = BTreeSet::new();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut heading: Option<String> = None;
    for event in markdown(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let Some(h) = heading.take() else { continue };
                let slug: String = h
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                anchors.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    anchors
}

/// The problem with one relative link from the page at `from`, if any.
fn broken(from: &str, target: &str) -> Option<String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        repo().join(from)
    } else {
        repo().join(from).parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!(
            "{from}: {target}: {} does not exist",
            file.display()
        ));
    }
    let anchor = anchor?;
    if file.extension().and_then(|e| e.to_str()) != Some("md") {
        return Some(format!(
            "{from}: {target}: an anchor into a file that is not Markdown"
        ));
    }
    let text = std::fs::read_to_string(&file).unwrap();
    (!anchors(&text).contains(anchor))
        .then(|| format!("{from}: {target}: no heading with the anchor #{anchor}"))
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut checked = 0;
    let mut problems = Vec::new();
    let mut pages = pages();
    pages.push(("BENCHMARKS.md".to_owned(), page("BENCHMARKS.md")));
    for (from, text) in pages {
        for target in link_targets(&text) {
            // Absolute URLs (https:, mailto:) are not ours to check offline.
            let scheme = target
                .split_once(':')
                .is_some_and(|(s, _)| !s.is_empty() && !s.contains(['/', '#']));
            if scheme {
                continue;
            }
            checked += 1;
            problems.extend(broken(&from, &target));
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_links_to_every_docs_page_and_each_says_who_it_is_for() {
    let readme = page("README.md");
    let linked: BTreeSet<String> = link_targets(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap_or_default().to_owned())
        .collect();
    for (path, text) in pages().into_iter().skip(1) {
        assert!(linked.contains(&path), "README.md does not link to {path}");
        let first_paragraph = text.split("\n\n").nth(1).unwrap_or_default();
        assert!(
            first_paragraph.starts_with("**For** "),
            "{path} does not start by saying who it is for"
        );
    }
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the rest belongs in docs/"
    );
}
