//! The command line: its shape (each subcommand's doc comment is its
//! `--help`) and [`dispatch`], which hands each subcommand to its file in
//! `commands`, or to the console. No other logic lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::Settings;
use crate::{commands, console};

#[derive(Debug, Parser)]
#[command(
    name = "invoice-reminder",
    version,
    about = "Emails customers about overdue invoices, once per period, from any number of replicas."
)]
pub struct Cli {
    /// Configuration file, layered over the compiled-in defaults [default: none]
    #[arg(
        long,
        global = true,
        env = "INVOICE_REMINDER_CONFIG",
        value_name = "PATH"
    )]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply database migrations (idempotent; safe from several replicas).
    Migrate,

    /// Insert demo customers and invoices, P% of the invoices overdue.
    Seed {
        /// Number of customers to create.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        customers: u32,
        /// Number of invoices to create, spread over the customers.
        #[arg(long)]
        invoices: u32,
        /// Share of the invoices that owe a reminder today (0-100), spread
        /// over every step; the rest are half paid, half not yet due.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u8).range(0..=100))]
        overdue_pct: u8,
        /// Do nothing if the database already has invoices (for one-shot
        /// containers that may be started again).
        #[arg(long)]
        if_empty: bool,
    },

    /// Run one tick now. Exits 0 when done, or when skipped because another
    /// replica holds the lock.
    RunOnce {
        /// List what would be sent; claim and send nothing.
        #[arg(long)]
        dry_run: bool,
    },

    /// Run the worker on schedule.cron until SIGTERM/SIGINT.
    Run,

    /// Check the reminders table: duplicates, unknown deliveries, failures,
    /// overdue invoices still missing a reminder. Exits 1 if any
    /// (invoice_id, period) has more than one reminder.
    Audit {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// A row `sending` for longer than this counts as unknown delivery.
        #[arg(long, default_value_t = crate::operator::unknown::UNKNOWN_AFTER.into(), value_name = "DURATION")]
        unknown_after: humantime::Duration,
    },

    /// Print the reminder an invoice would get, built exactly as the tick
    /// builds it (headers and text, or the HTML); sends and writes nothing.
    Preview {
        /// The invoice's id.
        #[arg(long, value_name = "ID", required_unless_present = "customer")]
        invoice: Option<String>,
        /// With reminders.group_by = "customer": the statement this customer
        /// (the source's customer_id) would get today.
        #[arg(long, value_name = "ID", conflicts_with_all = ["invoice", "step"])]
        customer: Option<String>,
        /// A step key such as `overdue` or `final-2` [default: the
        /// invoice's due step today]; `--stage` is an older name for it
        #[arg(long, value_name = "STEP", alias = "stage")]
        step: Option<String>,
        /// Render for this locale (BCP 47, e.g. `de-CH`) instead of the
        /// customer's.
        #[arg(long, value_name = "TAG")]
        locale: Option<String>,
        /// Print the HTML part instead of the text.
        #[arg(long)]
        html: bool,
    },

    /// Print the next fire times of schedule.cron in schedule.timezone,
    /// computed by the code that drives `run`: one line per fire, the local
    /// time with its offset, then the UTC time (RFC 3339).
    Next {
        /// How many fires.
        #[arg(long, default_value_t = 5)]
        count: usize,
        /// Start after this instant (RFC 3339; exclusive) [default: now]
        #[arg(long, value_name = "RFC3339")]
        from: Option<String>,
        /// Print a JSON array of {"local": ..., "utc": ...}.
        #[arg(long)]
        json: bool,
    },

    /// Ask a running worker's /healthz (on http.listen, or --url). Exits 0
    /// when healthy, 1 otherwise; for container healthchecks.
    Health {
        /// The URL to GET [default: http://<http.listen>/healthz, with
        /// 0.0.0.0 asked on 127.0.0.1]
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },

    /// Settle unknown deliveries (see `audit`): --sent once the mail
    /// server's log shows the Message-ID went out, --resend once it shows it
    /// did not. Only unknown rows change; resending a step that is no longer
    /// due is refused. Exits 1 if any row was refused.
    #[command(
        alias = "resolve",
        group(clap::ArgGroup::new("verdict").required(true).args(["sent", "resend"]))
    )]
    Settle {
        /// Reminder ids (audit's `reminder`) whose mail went out.
        #[arg(long, num_args = 1.., value_name = "ID")]
        sent: Vec<i64>,
        /// Reminder ids whose mail did not go out: send them again.
        #[arg(long, num_args = 1.., value_name = "ID")]
        resend: Vec<i64>,
    },

    /// Check source.relation against the source contract (exit 2 naming a
    /// missing or mistyped column), and EXPLAIN the scan: warns when it
    /// reads a large table sequentially, with the index to add.
    CheckSource,

    /// Why an invoice did or did not get a reminder, and when it gets the
    /// next: its source row, due date and steps, its reminder rows, and one
    /// reason (the database's today in the customers' zone). Writes nothing.
    /// Exits 0 when the invoice is in the source or has reminder rows, 1
    /// when neither.
    #[command(group(clap::ArgGroup::new("target").required(true).args(["invoice", "customer"])))]
    Explain {
        /// The invoice's id (the source's invoice_id).
        #[arg(long, value_name = "ID")]
        invoice: Option<String>,
        /// Every invoice of this customer (needs a customer_id column in
        /// source.relation).
        #[arg(long, value_name = "ID")]
        customer: Option<String>,
        /// Print as JSON, with a stable `reason`.
        #[arg(long)]
        json: bool,
        /// Print the archived message of the invoice's latest sent reminder,
        /// byte for byte as sent (archive.store = "database").
        #[arg(long, requires = "invoice", conflicts_with = "json")]
        raw: bool,
    },

    /// The suppression list: addresses no reminder goes to (compared
    /// case-insensitively). A reminder whose recipients are all suppressed
    /// is recorded `skipped`; suppressed addresses are left out of `To`.
    Suppress {
        #[command(subcommand)]
        action: SuppressAction,
    },

    /// Print the DNS TXT record to publish for [smtp.dkim]'s key:
    /// `<selector>._domainkey.<domain> TXT "v=DKIM1; k=rsa; p=..."` (long
    /// values cut into quoted strings of at most 255 characters). Exits 2
    /// when DKIM is not configured.
    DkimRecord,

    /// Serve the operator console on console.listen until SIGTERM/SIGINT
    /// (docs/console.md). Exits 2 without a [[console.users]] entry.
    Console {
        #[command(subcommand)]
        action: Option<ConsoleAction>,
    },

    /// Show the lock holder, the last runs and reminder counts by status.
    Status {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
        /// How many recent runs to show.
        #[arg(long, default_value_t = 10)]
        runs: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum SuppressAction {
    /// Add ADDRESS to the list (or replace its reason if it is listed).
    Add {
        /// An email address.
        address: String,
        /// Why, in your words [default: manual]
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// Take ADDRESS off the list: its next reminder goes out again (steps
    /// already recorded `skipped` are not resent).
    Remove {
        /// An email address (any case).
        address: String,
    },
    /// Print the list, newest first: address, reason, source, when.
    List {
        /// Print a JSON array of {address, reason, source, detail,
        /// suppressed_at}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConsoleAction {
    /// Read a password on stdin and print its argon2id PHC string, for
    /// `password_hash` in [[console.users]].
    HashPassword,
}

/// Runs `command` with `settings`.
pub async fn dispatch(command: Command, settings: Settings) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate => commands::migrate::migrate(&settings).await,
        Command::Seed {
            customers,
            invoices,
            overdue_pct,
            if_empty,
        } => commands::seed::seed(&settings, customers, invoices, overdue_pct, if_empty).await,
        Command::RunOnce { dry_run } => commands::run_once::run_once(settings, dry_run).await,
        Command::Run => commands::run::run(settings).await,
        Command::Audit {
            json,
            unknown_after,
        } => commands::audit::audit(&settings, json, unknown_after.into()).await,
        Command::Preview {
            invoice,
            customer,
            step,
            locale,
            html,
        } => {
            let request = commands::preview::Request {
                invoice: invoice.unwrap_or_default(),
                customer,
                step,
                locale,
                html,
            };
            commands::preview::preview(&settings, request).await
        }
        Command::Next { count, from, json } => commands::next::next(&settings, count, from, json),
        Command::Settle { sent, resend } => commands::settle::settle(&settings, sent, resend).await,
        Command::Health { url } => commands::health::health(&settings, url).await,
        Command::Status { json, runs } => commands::status::status(settings, json, runs).await,
        Command::CheckSource => commands::check_source::check_source(&settings).await,
        Command::Explain {
            invoice,
            customer,
            json,
            raw,
        } => {
            let target = match (invoice, customer) {
                (Some(id), _) => commands::explain::Target::Invoice(id),
                (None, Some(id)) => commands::explain::Target::Customer(id),
                (None, None) => {
                    return Err(crate::operator::UsageError(
                        "explain needs --invoice ID or --customer ID".into(),
                    )
                    .into());
                }
            };
            commands::explain::explain(&settings, target, json, raw).await
        }
        Command::Suppress { action } => match action {
            SuppressAction::Add { address, reason } => {
                commands::suppress::add(&settings, &address, reason.as_deref()).await
            }
            SuppressAction::Remove { address } => {
                commands::suppress::remove(&settings, &address).await
            }
            SuppressAction::List { json } => commands::suppress::list(&settings, json).await,
        },
        Command::DkimRecord => commands::dkim_record::dkim_record(&settings),
        Command::Console {
            action: Some(ConsoleAction::HashPassword),
        } => console::hash_password(),
        Command::Console { action: None } => console::run(settings).await,
    }
}
