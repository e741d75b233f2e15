//! The promise under random input and random faults. Each seed draws a
//! source view (`source`: repeated keys, NULLs, odd column types, long and
//! unicode names with CR/LF, large amounts, JPY/EUR/KWD in any case,
//! several addresses in one cell; in customer mode also customers with
//! many invoices across several steps, customers whose every address is
//! suppressed, valid rows without a customer) and a list of ticks, each a
//! `run-once` process with at most one fault (`ticks`: SIGKILL mid-tick,
//! 4xx replies, a relay refusing extra connections with 421, the database
//! path cut, stalled or down). Then the operator settles the unknown
//! deliveries (`operator`: `resolve`, by the Message-IDs the servers
//! received) and runs clean ticks until nothing is claimed, and the
//! promise is checked:
//!
//! - no Message-ID reached the SMTP servers twice;
//! - no process panicked or crashed;
//! - every valid owed (invoice, step) was mailed exactly once, and nothing
//!   else was mailed (customer mode: listed once across the statements;
//!   a suppressed customer's steps recorded `skipped`; no customer mailed
//!   twice within `min_days_between` but for a statement's continuation);
//! - an unknown delivery whose mail never reached a server comes only from
//!   a run that was killed or lost its database until it exited;
//! - every invalid row is reported with its problem (`audit --json`, and
//!   the last tick's `job_runs.source_problems`), and no valid row is.
//!
//! CI runs three seeds of each grouping. The soak runs many (FUZZ_SEEDS,
//! 200 by default, from FUZZ_FIRST_SEED or a printed random one; ~10 s a
//! seed here), and `scripts/fuzz.sh` replays one:
//!
//! ```text
//! scripts/fuzz.sh --seed 17 --grouping customer        # one seed
//! scripts/fuzz.sh --seeds 200 --grouping customer      # before a release
//! FUZZ_FIRST_SEED=500 FUZZ_SEEDS=20 cargo nextest run --test faults --run-ignored only fuzz_many
//! ```
//!
//! Every failure message starts with the seed and what happened so far; a
//! failure elsewhere (a helper's timeout) prints the seed as it unwinds.

mod customers;
mod operator;
mod rng;
mod rows;
mod source;
mod ticks;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::common::{Backend, SmtpMode, World};
use crate::harness;
use rng::Rng;
use source::{Expected, Named};
use ticks::{Fault, Lab, vars};

/// The seeds CI runs (each covers every kind of fault; see `Fault::plan`).
const CI_SEEDS: [u64; 3] = [1, 2, 3];

/// How the seed's reminders are grouped into mails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    Invoice,
    Customer,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sources_under_random_faults_mail_each_valid_reminder_once_and_report_each_bad_row()
{
    run_seeds(Grouping::Invoice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_customer_sources_under_random_faults_mail_each_clean_step_once_in_statements() {
    run_seeds(Grouping::Customer).await;
}

/// `FUZZ_SEED`, or the CI seeds.
async fn run_seeds(grouping: Grouping) {
    match env_u64("FUZZ_SEED") {
        Some(seed) => run_seed(seed, grouping).await,
        None => {
            for seed in CI_SEEDS {
                run_seed(seed, grouping).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run with --run-ignored only"]
async fn fuzz_many_seeds_of_random_sources_under_random_faults() {
    soak(Grouping::Invoice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run with --run-ignored only"]
async fn fuzz_many_seeds_of_random_customer_sources_under_random_faults() {
    soak(Grouping::Customer).await;
}

async fn soak(grouping: Grouping) {
    let seeds = env_u64("FUZZ_SEEDS").unwrap_or(200);
    if let Some(seed) = env_u64("FUZZ_SEED") {
        return run_seed(seed, grouping).await;
    }
    let first = env_u64("FUZZ_FIRST_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    println!("fuzz soak ({grouping:?}): seeds {first}..{}", first + seeds);
    for seed in first..first + seeds {
        run_seed(seed, grouping).await;
    }
}

/// One seed, from a fresh world; again if the date changed meanwhile (the
/// expected steps are those of the day the seed started).
async fn run_seed(seed: u64, grouping: Grouping) {
    let _named = NameOnFailure(seed, grouping);
    for _ in 0..3 {
        if try_seed(seed, grouping).await {
            return;
        }
    }
    panic!("seed {seed}: the database's date changed during three attempts");
}

/// Prints the seed if the test fails while it runs.
struct NameOnFailure(u64, Grouping);

impl Drop for NameOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "random: seed {seed} failed (rerun: {})",
                rerun(self.0, self.1),
                seed = self.0
            );
        }
    }
}

/// The command that replays `seed`.
pub fn rerun(seed: u64, grouping: Grouping) -> String {
    let mode = match grouping {
        Grouping::Invoice => "invoice",
        Grouping::Customer => "customer",
    };
    format!("scripts/fuzz.sh --seed {seed} --grouping {mode}")
}

async fn today(world: &World) -> chrono::NaiveDate {
    invoice_reminder::db::today(&world.database(), chrono_tz::UTC)
        .await
        .expect("the database's date")
}

/// Runs `seed`; false if the date changed before it was checked.
async fn try_seed(seed: u64, grouping: Grouping) -> bool {
    let mut rng = Rng::new(seed);
    let backend = *rng.pick(&[Backend::Redis, Backend::Postgres]);
    let mut world = World::new().await;
    harness::fast_replicas(&mut world);
    backend.configure(&mut world);
    let by_customer = grouping == Grouping::Customer;
    let mut shape_of_mail = String::new();
    let mut per_mail = None;
    if by_customer {
        per_mail = Some(*rng.pick(&[1u32, 2, 3, 50]));
        let gap = rng.range(0, 2);
        world
            .set("reminders.group_by", "customer")
            .set("reminders.min_days_between", gap)
            .set("reminders.retry_backoff", "1s");
        shape_of_mail = format!(", min_days_between {gap}");
    }
    let today_then = today(&world).await;
    let source = source::generate(&mut rng, today_then, &world.settings(), by_customer);
    sqlx::raw_sql(sqlx::AssertSqlSafe(source.shape.ddl()))
        .execute(world.pool())
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: the view of {:?}: {e}", source.shape));
    source::insert(world.pool(), &source.rows).await;
    for address in &source.expected.suppress {
        sqlx::query(
            "INSERT INTO suppressions (address, reason, source) VALUES ($1, 'fuzz', 'cli')
             ON CONFLICT DO NOTHING",
        )
        .bind(address)
        .execute(world.pool())
        .await
        .expect("suppress");
    }
    let batch_size = *rng.pick(&[1u32, 2, 3, 5, 7, 50, 500]);
    if let Some(per_mail) = per_mail {
        // At most batch_size, as the settings require.
        let per_mail = per_mail.min(batch_size);
        world.set("reminders.max_invoices_per_mail", per_mail);
        shape_of_mail.push_str(&format!(", max_invoices_per_mail {per_mail}"));
    }
    let concurrency = rng.range(1, 4);
    world
        .set("source.relation", "fz.source")
        .set("reminders.batch_size", batch_size)
        .set("reminders.send_concurrency", concurrency)
        .set("smtp.pool_size", concurrency.max(rng.range(1, 8)))
        // A 4xx uses an attempt; several 4xx ticks must not exhaust them.
        .set("reminders.max_attempts", 50);
    let delay = Duration::from_millis(rng.range(2, 20) as u64);
    let plan = Fault::plan(&mut rng);
    let expected = &source.expected;
    // Work left for every fault tick.
    let per_tick = (expected.owed.len() / plan.len()).max(3).to_string();

    let mut lab = Lab::new(seed, grouping, &world, backend, SmtpMode::Delay(delay));
    lab.note(format!(
        "{grouping:?} mode, {} rows ({} owed, {} suppressed, {} quiet, {} problems), view {:?}, lock {}, \
         batch_size {batch_size}, send_concurrency {concurrency}, sink delay {delay:?}, \
         max_per_tick {per_tick}{shape_of_mail}",
        source.rows.len(),
        expected.owed.len(),
        expected.suppressed.len(),
        expected.quiet.len(),
        expected.problems.len(),
        source.shape,
        backend.name(),
    ));
    for fault in plan {
        lab.tick(fault, &vars(&[("REMINDERS__MAX_PER_TICK", &per_tick)]))
            .await;
    }

    // The operator: settle what is unknown, then tick until nothing is left.
    lab.sink_mode = SmtpMode::Accept;
    world.sink.set_mode(SmtpMode::Accept);
    lab.settle_unknown().await;
    let mut clean = 0;
    loop {
        lab.tick(Fault::None, &vars(&[("REMINDERS__MAX_PER_TICK", "0")]))
            .await;
        let (claimed, open): (i32, i64) = sqlx::query_as(
            "SELECT (SELECT claimed FROM job_runs ORDER BY id DESC LIMIT 1),
                    (SELECT count(*) FROM reminders WHERE status IN ('failed', 'sending'))",
        )
        .fetch_one(world.pool())
        .await
        .expect("the last run");
        if claimed == 0 && open == 0 {
            break;
        }
        clean += 1;
        // One statement per customer and tick: a customer with many
        // invoices and a small max_invoices_per_mail needs a tick for each.
        let most = match grouping {
            Grouping::Invoice => 20,
            Grouping::Customer => 20 + expected.owed.len(),
        };
        if clean >= most {
            let rows: Vec<String> = sqlx::query_scalar(
                "SELECT concat_ws(' ', id, invoice_id, period, status, 'customer', customer_id,
                        'attempts', attempts, 'run', run_id, 'message', message_id,
                        'last attempt', last_attempt_at, last_error)
                   FROM reminders WHERE status IN ('failed', 'sending') ORDER BY id",
            )
            .fetch_all(world.pool())
            .await
            .expect("open rows");
            panic!(
                "{}\n{most} clean ticks and still {claimed} claimed, {open} failed or sending:\n{}",
                lab.context(),
                rows.join("\n")
            );
        }
    }
    if today(&world).await != today_then {
        return false;
    }
    match grouping {
        Grouping::Invoice => check_promise(&lab, expected).await,
        Grouping::Customer => customers::check_promise(&lab, expected).await,
    }
    check_problems(&lab, expected).await;
    println!("{}", lab.context());
    true
}

/// The promise, from the mail the servers received and from audit.
async fn check_promise(lab: &Lab<'_>, expected: &Expected) {
    let context = lab.context();
    let report = lab.audit().await;
    assert_eq!(
        report["duplicates"].as_array().map(Vec::len),
        Some(0),
        "{context}\naudit: {report}"
    );
    assert_eq!(
        report["unknown"].as_array().map(Vec::len),
        Some(0),
        "{context}\nunknown after the operator settled them: {report}"
    );

    let mut received: BTreeMap<String, usize> = BTreeMap::new();
    for id in lab.message_ids() {
        *received.entry(id).or_default() += 1;
    }
    let twice: Vec<_> = received.iter().filter(|(_, n)| **n > 1).collect();
    for mail in lab.world.sink.received() {
        // CR/LF in names and numbers never starts a header of its own.
        assert!(
            mail.header("Bcc").is_none() && mail.header("X-Injected").is_none(),
            "{context}\na header was injected:\n{}",
            mail.raw
        );
    }
    assert!(
        twice.is_empty(),
        "{context}\nMessage-IDs received more than once: {twice:?}"
    );
    let unexpected: Vec<_> = received
        .keys()
        .filter(|id| !expected.mails.contains_key(*id))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{context}\nmailed but not a valid owed reminder: {unexpected:?}"
    );
    let missing: Vec<_> = expected
        .mails
        .iter()
        .filter(|(id, _)| !received.contains_key(*id))
        .map(|(_, (key, step))| format!("{key:?} {step}"))
        .collect();
    assert!(
        missing.is_empty(),
        "{context}\nvalid owed reminders never mailed: {missing:?}"
    );

    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM reminders GROUP BY status ORDER BY status")
            .fetch_all(lab.world.pool())
            .await
            .expect("statuses");
    assert_eq!(
        statuses,
        vec![("sent".to_owned(), expected.mails.len() as i64)],
        "{context}\nreminders by status"
    );
}

/// Every invalid row is reported with its problem, by audit and by the
/// last tick, and no valid row is.
async fn check_problems(lab: &Lab<'_>, expected: &Expected) {
    let context = lab.context();
    let report = lab.audit().await;
    let reported: BTreeSet<(Named, String)> = report["source_problems"]
        .as_array()
        .expect("source_problems")
        .iter()
        .map(|p| {
            let named = match (p["invoice_id"].as_str(), p["invoice_number"].as_str()) {
                (Some(id), _) => Named::Id(id.to_owned()),
                (None, Some(number)) => Named::Number(number.to_owned()),
                (None, None) => Named::Number(String::new()),
            };
            (named, p["problem"].as_str().unwrap_or("?").to_owned())
        })
        .collect();
    let wanted: BTreeSet<(Named, String)> = expected
        .problems
        .iter()
        .map(|(named, label)| (named.clone(), (*label).to_owned()))
        .collect();
    let not_reported: Vec<_> = wanted.difference(&reported).collect();
    let wrongly_reported: Vec<_> = reported.difference(&wanted).collect();
    assert!(
        not_reported.is_empty() && wrongly_reported.is_empty(),
        "{context}\ninvalid rows not reported (or not with their problem): {not_reported:?}\n\
         reported but not as generated: {wrongly_reported:?}"
    );
    assert_eq!(
        report["source_problems_count"].as_u64(),
        Some(wanted.len() as u64),
        "{context}\naudit: {report}"
    );
    let counted: i32 =
        sqlx::query_scalar("SELECT source_problems FROM job_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(lab.world.pool())
            .await
            .expect("the last run");
    assert_eq!(
        counted as usize,
        wanted.len(),
        "{context}\nthe last tick's job_runs.source_problems"
    );
}
