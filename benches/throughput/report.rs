//! What the bench prints: each round as it ends, then tables of medians,
//! then the targets with PASS/FAIL in a block to paste into BENCHMARKS.md.

use crate::extras::Extras;
use crate::worker::{CommandRun, Run};

/// One round of one backlog, in the order it ran.
pub struct RoundResult {
    pub e2e: Run,
    /// smtp-source's messages per second, this round.
    pub source: f64,
    pub source_messages: usize,
    pub baseline: Option<Run>,
    pub db_only: Option<f64>,
    pub smtp_only: Option<f64>,
}

impl RoundResult {
    fn e2e_per_source(&self) -> f64 {
        self.e2e.rate / self.source
    }
}

/// Every round of one backlog.
pub struct Row {
    pub size: usize,
    /// The one-tick backlog (one round, then the operator's commands).
    pub one_tick: bool,
    pub naive: Option<f64>,
    /// `smtp-source -d` (connections reused), once per backlog.
    pub source_reused: f64,
    pub rounds: Vec<RoundResult>,
}

impl Row {
    fn median_of(&self, f: impl Fn(&RoundResult) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.rounds.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| median(&values))
    }

    fn list_of(&self, f: impl Fn(&RoundResult) -> Option<f64>, decimals: usize) -> String {
        let values: Vec<f64> = self.rounds.iter().filter_map(f).collect();
        list(&values, decimals)
    }

    /// The target's figure: the median of the per-round ratios.
    fn e2e_per_source(&self) -> f64 {
        self.median_of(|r| Some(r.e2e_per_source())).unwrap_or(0.0)
    }

    fn rss_mib(&self) -> f64 {
        self.median_of(|r| Some(r.e2e.rss_kib as f64 / 1024.0))
            .unwrap_or(0.0)
    }
}

/// One round, as soon as it ends.
pub fn print_round(round: usize, r: &RoundResult) {
    let mut line = format!(
        "  round {round}: end-to-end {:.0}/s ({:.2} s), smtp-source {:.0}/s ({} messages): {:.2}x",
        r.e2e.rate,
        r.e2e.secs,
        r.source,
        r.source_messages,
        r.e2e_per_source()
    );
    if let Some(b) = &r.baseline {
        line += &format!(
            "; baseline {:.0}/s: {:.2}x of smtp-source, new/baseline {:.2}x",
            b.rate,
            b.rate / r.source,
            r.e2e.rate / b.rate
        );
    }
    println!("{line}");
    println!("           end-to-end: {}", cost_line(&r.e2e));
    if let Some(b) = &r.baseline {
        println!("           baseline:   {}", cost_line(b));
    }
    if let (Some(d), Some(s)) = (r.db_only, r.smtp_only) {
        println!("           diagnostics: db-only {d:.0}/s, smtp-only {s:.0}/s");
    }
}

fn cost_line(run: &Run) -> String {
    let per_k = |n: i64| n as f64 * 1000.0 / run.sent.max(1) as f64;
    match run.cost {
        Some(c) => format!(
            "{} commits ({:.1} per 1,000 reminders), {} rows inserted, {} updated ({} HOT), \
             {:.1} rows read per reminder, {:.2} s CPU, peak RSS {:.1} MiB",
            c.commits,
            per_k(c.commits),
            c.inserted,
            c.updated,
            c.hot_updated,
            c.rows_read as f64 / run.sent.max(1) as f64,
            run.cpu_secs,
            run.rss_kib as f64 / 1024.0
        ),
        None => format!(
            "{:.2} s CPU, peak RSS {:.1} MiB",
            run.cpu_secs,
            run.rss_kib as f64 / 1024.0
        ),
    }
}

/// `audit` or `check-source` after the one-tick backlog.
pub fn print_command(size: usize, c: &CommandRun) {
    println!(
        "           {} over {} sent reminders (after the tick): {:.2} s, {}",
        c.name,
        size,
        c.secs,
        outcome(c)
    );
}

fn outcome(c: &CommandRun) -> String {
    match c.code {
        0 => format!("exit 0 ({} lines of output)", c.stdout_lines),
        code => format!("exit {code}: {}", c.stderr_tail.replace('\n', " | ")),
    }
}

/// The tables of medians, after every backlog.
pub fn print_tables(rows: &[Row], baseline: Option<&str>) {
    if rows.is_empty() {
        return;
    }
    println!(
        "against smtp-source (rates: medians; ratios: medians of the per-round ratios, each \
         round against its own smtp-source run)"
    );
    let mut header = format!(
        "{:>8}  {:>6}  {:>12}  {:>13}  {:>10}  {:>10}",
        "backlog", "rounds", "end-to-end/s", "smtp-source/s", "e2e/source", "peak RSS"
    );
    if baseline.is_some() {
        header += &format!(
            "  {:>10}  {:>11}  {:>8}  {:>10}",
            "baseline/s", "base/source", "new/base", "base RSS"
        );
    }
    println!("{header}");
    for row in rows {
        let mut line = format!(
            "{:>8}  {:>6}  {:>12.0}  {:>13.0}  {:>9.2}x  {:>6.1} MiB",
            row.size,
            row.rounds.len(),
            row.median_of(|r| Some(r.e2e.rate)).unwrap_or(0.0),
            row.median_of(|r| Some(r.source)).unwrap_or(0.0),
            row.e2e_per_source(),
            row.rss_mib()
        );
        if baseline.is_some() {
            line += &format!(
                "  {:>10.0}  {:>10.2}x  {:>7.2}x  {:>6.1} MiB",
                row.median_of(|r| r.baseline.as_ref().map(|b| b.rate))
                    .unwrap_or(0.0),
                row.median_of(|r| r.baseline.as_ref().map(|b| b.rate / r.source))
                    .unwrap_or(0.0),
                row.median_of(|r| r.baseline.as_ref().map(|b| r.e2e.rate / b.rate))
                    .unwrap_or(0.0),
                row.median_of(|r| r.baseline.as_ref().map(|b| b.rss_kib as f64 / 1024.0))
                    .unwrap_or(0.0),
            );
        }
        println!("{line}");
        if row.rounds.len() > 1 {
            let mut runs = format!(
                "{:>8}  runs: end-to-end {}; smtp-source {}; e2e/source {}",
                "",
                row.list_of(|r| Some(r.e2e.rate), 0),
                row.list_of(|r| Some(r.source), 0),
                row.list_of(|r| Some(r.e2e_per_source()), 2),
            );
            if baseline.is_some() {
                runs += &format!(
                    "; baseline {}; new/base {}",
                    row.list_of(|r| r.baseline.as_ref().map(|b| b.rate), 0),
                    row.list_of(|r| r.baseline.as_ref().map(|b| r.e2e.rate / b.rate), 2),
                );
            }
            println!("{runs}");
        }
    }
    println!();
    println!(
        "what a run cost (medians): commits, rows inserted and updated (pg_stat_database of the \
         run's database, around the child only), of those updates the HOT ones and rows read \
         per reminder (the database's own statistics views), CPU of the child (user + system)"
    );
    println!(
        "{:>8}  {:<22}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>7}  {:>10}",
        "backlog",
        "build",
        "commits",
        "per 1k",
        "inserted",
        "updated",
        "HOT",
        "read/rem",
        "CPU s",
        "CPU ms/1k"
    );
    let base_label = baseline.map(|rev| format!("baseline {rev}"));
    for row in rows {
        print_cost(row, "end-to-end", |r| Some(&r.e2e));
        if let Some(label) = &base_label {
            print_cost(row, label, |r| r.baseline.as_ref());
        }
    }
    println!();
    println!("diagnostics (medians; our own code alone, not limits)");
    println!(
        "{:>8}  {:>10}  {:>12}  {:>8}  {:>10}  {:>16}",
        "backlog", "db-only/s", "smtp-only/s", "naive/s", "e2e/naive", "smtp-source -d/s"
    );
    let dash = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
    for row in rows {
        let e2e = row.median_of(|r| Some(r.e2e.rate)).unwrap_or(0.0);
        println!(
            "{:>8}  {:>10}  {:>12}  {:>8}  {:>10}  {:>16.0}",
            row.size,
            dash(row.median_of(|r| r.db_only), &|v| format!("{v:.0}")),
            dash(row.median_of(|r| r.smtp_only), &|v| format!("{v:.0}")),
            dash(row.naive, &|v| format!("{v:.0}")),
            dash(row.naive, &|v| format!("{:.1}x", e2e / v)),
            row.source_reused,
        );
    }
    println!();
}

fn print_cost<'a>(row: &'a Row, label: &str, run: impl Fn(&'a RoundResult) -> Option<&'a Run>) {
    let runs: Vec<&Run> = row.rounds.iter().filter_map(run).collect();
    if runs.is_empty() {
        return;
    }
    let m = |f: &dyn Fn(&Run) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
        (!v.is_empty()).then(|| median(&v))
    };
    let per_k = |r: &Run, n: i64| n as f64 * 1000.0 / r.sent.max(1) as f64;
    let cell = |v: Option<f64>, decimals: usize| {
        v.map(|v| format!("{v:.decimals$}"))
            .unwrap_or_else(|| "-".into())
    };
    println!(
        "{:>8}  {:<22}  {:>8}  {:>9}  {:>9}  {:>9}  {:>9}  {:>8}  {:>7}  {:>10}",
        row.size,
        label,
        cell(m(&|r| r.cost.map(|c| c.commits as f64)), 0),
        cell(m(&|r| r.cost.map(|c| per_k(r, c.commits))), 1),
        cell(m(&|r| r.cost.map(|c| c.inserted as f64)), 0),
        cell(m(&|r| r.cost.map(|c| c.updated as f64)), 0),
        cell(m(&|r| r.cost.map(|c| c.hot_updated as f64)), 0),
        cell(
            m(&|r| r.cost.map(|c| c.rows_read as f64 / r.sent.max(1) as f64)),
            1
        ),
        cell(m(&|r| Some(r.cpu_secs)), 2),
        cell(
            m(&|r| Some(r.cpu_secs * 1000.0 * 1000.0 / r.sent.max(1) as f64)),
            1
        ),
    );
}

/// The targets, with PASS/FAIL, to paste into BENCHMARKS.md.
pub fn summarize(rows: &[Row], commands: &[CommandRun], one_tick: usize, extras: Option<&Extras>) {
    // The targets are set at 1M; a run without a one-tick backlog says so.
    let one_tick = if one_tick == 0 { 1_000_000 } else { one_tick };
    let at = |n: usize| rows.iter().find(|r| r.size == n && !r.one_tick);
    let tick_row = rows.iter().find(|r| r.one_tick);
    println!(
        "targets (end-to-end = `run-once` with the default configuration; smtp-source = \
         `smtp-source -s 8` on the same sink in the same round; a ratio is the median of the \
         per-round ratios):"
    );
    for n in [20_000, 100_000] {
        let label = format!("end-to-end >= 1.0x smtp-source at {}", human(n));
        match at(n) {
            Some(row) => {
                let x = row.e2e_per_source();
                target(
                    &format!(
                        "{label} ({} round{})",
                        row.rounds.len(),
                        if row.rounds.len() == 1 { "" } else { "s" }
                    ),
                    format!("{x:.2}x"),
                    x >= 1.0,
                );
            }
            None => not_measured(&label, "not in BENCH_SIZES"),
        }
    }
    let label = format!(
        "end-to-end >= 0.8x smtp-source at {}, one tick",
        human(one_tick)
    );
    match tick_row {
        Some(row) => {
            let x = row.e2e_per_source();
            let messages = row.rounds.first().map_or(0, |r| r.source_messages);
            target(
                &format!("{label} (smtp-source over {})", human(messages)),
                format!("{x:.2}x"),
                x >= 0.8,
            );
        }
        None => not_measured(&label, "no BENCH_ONE_TICK"),
    }
    let label = format!("peak RSS at {} <= 1.5x at 10k", human(one_tick));
    match (tick_row, at(10_000)) {
        (Some(big), Some(small)) => {
            let x = big.rss_mib() / small.rss_mib();
            target(
                &label,
                format!(
                    "{x:.2}x ({:.1} / {:.1} MiB)",
                    big.rss_mib(),
                    small.rss_mib()
                ),
                x <= 1.5,
            );
        }
        _ => not_measured(&label, "needs 10k in BENCH_SIZES and BENCH_ONE_TICK"),
    }
    let label = format!("audit at {} <= 5 s", human(one_tick));
    match commands.iter().find(|c| c.name == "audit") {
        Some(c) => target(
            &label,
            format!("{:.2} s, {}", c.secs, outcome(c)),
            c.code == 0 && c.secs <= 5.0,
        ),
        None => not_measured(&label, "no BENCH_ONE_TICK"),
    }
    let label = "end-to-end >= 5x naive at 10k";
    match at(10_000).and_then(|r| r.naive.map(|n| (r, n))) {
        Some((row, naive)) => {
            let x = row.median_of(|r| Some(r.e2e.rate)).unwrap_or(0.0) / naive;
            target(label, format!("{x:.1}x"), x >= 5.0);
        }
        None => not_measured(
            label,
            "needs 10k in BENCH_SIZES and BENCH_NAIVE_MAX >= 10000",
        ),
    }
    let label = "1k-among-1M tick <= 2x 1k-among-1k";
    match extras {
        Some(e) => {
            let x = e.large.0 / e.small.0;
            target(label, format!("{x:.2}x"), x <= 2.0);
        }
        None => not_measured(label, "BENCH_EXTRAS=0"),
    }
    if let Some(c) = commands.iter().find(|c| c.name == "check-source") {
        println!(
            "  (diagnostic) check-source at {}: {:.2} s, {}",
            human(one_tick),
            c.secs,
            outcome(c)
        );
    }
    let ab: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            row.median_of(|r| r.baseline.as_ref().map(|b| r.e2e.rate / b.rate))
                .map(|x| format!("{} {x:.2}x", human(row.size)))
        })
        .collect();
    if !ab.is_empty() {
        println!(
            "  (A/B) new/baseline, median of the per-round ratios: {}",
            ab.join("; ")
        );
    }
}

fn target(label: &str, value: String, ok: bool) {
    println!("  {label:<72} {value}  {}", verdict(ok));
}

fn not_measured(label: &str, why: &str) {
    println!("  {label:<72} not measured ({why})");
}

/// 20000 as "20k", 1000000 as "1M".
fn human(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1000 && n % 1000 == 0 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

/// The middle value (the mean of the two middle ones for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// `values` joined with "/", each with `decimals` decimals.
pub fn list(values: &[f64], decimals: usize) -> String {
    values
        .iter()
        .map(|v| format!("{v:.decimals$}"))
        .collect::<Vec<_>>()
        .join("/")
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "FAIL" }
}

pub fn first_line(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}
