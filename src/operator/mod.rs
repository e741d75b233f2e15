//! What the operator asks and decides, once, for both of its hands: the
//! command line (`commands`, which prints and sets exit codes) and the
//! console (`console`, which renders pages). Each question or change is
//! one function here, reading and writing through `db`, so the two can
//! never answer differently:
//! * [`explain`]: why an invoice (or each of a customer's) did or did not
//!   get a reminder, reading a customer once;
//! * [`survey`]: what is owed today, and the source problems among it;
//! * [`unknown`] and [`settle`]: unknown deliveries by mail, and settling
//!   one (read, plan, write with its activity record, report);
//! * [`suppress`], [`pause`] and [`holds`]: the suppression list, the
//!   console's pauses, and lifting a payment signal's hold;
//! * [`lock_holder`]: who holds the lock; [`preview`]: a mail as the tick
//!   would compose it;
//! * [`UsageError`]: a request that is wrong for this configuration.

pub mod activity;
pub mod admin;
pub mod archive;
pub mod audit;
pub mod desk;
pub mod explain;
pub mod holds;
pub mod lock_holder;
pub mod overview;
pub mod pause;
pub mod plan;
pub mod preview;
pub mod search;
pub mod sessions;
pub mod settle;
pub mod source;
pub mod suppress;
pub mod survey;
pub mod unknown;

/// Who makes a change: the command line (no activity record), or a console
/// user, whose change is written with its activity record in the same
/// transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    CommandLine,
    Console(&'a str),
}

impl<'a> Actor<'a> {
    /// The console user, whose change the activity log keeps.
    pub fn user(self) -> Option<&'a str> {
        match self {
            Self::CommandLine => None,
            Self::Console(user) => Some(user),
        }
    }
}

/// A request used wrongly for this configuration: the command line exits
/// 2 with it, the console answers 4xx. The one error type for exit 2 after
/// the settings load: a template that does not load, a source view that
/// breaks its contract and a command's wrong arguments all become this,
/// where they are met.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The error of a statement, with `doing` as context; it points at
/// `migrate` only when a table or schema of ours is missing (a timeout
/// names its own setting, see `db::conn::timed_out`).
pub fn db_failed(doing: &'static str) -> impl FnOnce(sqlx::Error) -> anyhow::Error {
    move |e| {
        let missing = matches!(&e, sqlx::Error::Database(d)
            if d.code().is_some_and(|c| c == "42P01" || c == "3F000"));
        let e = anyhow::Error::new(e);
        if missing {
            e.context(format!("{doing} (did you run `migrate`?)"))
        } else {
            e.context(doing)
        }
    }
}
