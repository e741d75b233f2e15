//! The envelope of one SMTP transaction: MAIL, each RCPT and DATA, one at
//! a time or pipelined (RFC 2920), each within its deadline. It says
//! which recipients were refused while the others were taken, or why the
//! envelope failed and whether the session can still be reset.

use std::time::Duration;

use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use tokio::time::timeout;

/// Why the envelope (MAIL, RCPT, DATA) was not accepted.
pub(super) enum Envelope {
    /// A command failed; the session can be reset.
    Refused(Failure),
    /// DATA was accepted although a command before it failed (pipelined):
    /// the server waits for a body that must not come, so the connection
    /// is dropped.
    InData(Failure),
}

/// A command of the envelope that failed, and which recipient's RCPT it
/// was (None: MAIL or DATA).
pub(super) struct Failure {
    pub(super) error: StepError,
    pub(super) rcpt: Option<usize>,
}

/// MAIL, RCPT and DATA one at a time, each waiting for its reply. Ok: the
/// server waits for the data, and these recipients were refused (never
/// all of them: then nothing is sent, and the first refusal is the error).
pub(super) async fn stepwise_envelope(
    conn: &mut AsyncSmtpConnection,
    mail_from: Mail,
    rcpts: &[Rcpt],
    limit: Duration,
) -> Result<Vec<Failure>, Envelope> {
    let refused = |rcpt: Option<usize>| move |error| Envelope::Refused(Failure { error, rcpt });
    step(limit, conn.command(mail_from))
        .await
        .map_err(refused(None))?;
    let mut refusals = Vec::new();
    for (n, rcpt) in rcpts.iter().enumerate() {
        match step(limit, conn.command(rcpt)).await {
            Ok(_) => {}
            Err(error) if is_reply(&error) => refusals.push(Failure {
                error,
                rcpt: Some(n),
            }),
            Err(error) => return Err(refused(Some(n))(error)),
        }
    }
    if refusals.len() == rcpts.len() && !refusals.is_empty() {
        let first = refusals.swap_remove(0);
        return Err(Envelope::Refused(first));
    }
    step(limit, conn.command(Data))
        .await
        .map_err(refused(None))?;
    Ok(refusals)
}

/// MAIL, every RCPT and DATA in one write (RFC 2920), then their replies
/// in order. Every reply is read, whatever came before it, so the session
/// stays in step. Ok as `stepwise_envelope`'s.
pub(super) async fn pipelined_envelope(
    conn: &mut AsyncSmtpConnection,
    mail_from: Mail,
    rcpts: &[Rcpt],
    limit: Duration,
) -> Result<Vec<Failure>, Envelope> {
    // The group's write, and the reply to MAIL.
    let first = step(limit, conn.command(group(mail_from, rcpts))).await;
    envelope_replies(conn, first.map(|_| ()), rcpts.len(), limit).await
}

/// The replies to an envelope already written (by this send, or by the
/// send before it on this connection, after its message's end): MAIL's
/// (`mail`, read already when this send wrote the group), each RCPT's and
/// DATA's. Ok as `stepwise_envelope`'s.
pub(super) async fn envelope_replies(
    conn: &mut AsyncSmtpConnection,
    mail: Result<(), StepError>,
    rcpts: usize,
    limit: Duration,
) -> Result<Vec<Failure>, Envelope> {
    let mut first_error: Option<Failure> = None;
    let mut refusals: Vec<Failure> = Vec::new();
    let mut note = |result: Result<(), StepError>, rcpt: Option<usize>| -> Result<(), Envelope> {
        match result {
            // One recipient refused: the others may still get the message.
            Err(error @ StepError::Smtp(_)) if is_reply(&error) && rcpt.is_some() => {
                refusals.push(Failure { error, rcpt });
                Ok(())
            }
            Err(error @ StepError::Smtp(_)) if is_reply(&error) => {
                first_error.get_or_insert(Failure { error, rcpt });
                Ok(())
            }
            // A broken connection or a timeout: nothing more will come.
            Err(error) => Err(Envelope::Refused(Failure { error, rcpt })),
            Ok(()) => Ok(()),
        }
    };
    note(mail, None)?;
    for n in 0..rcpts {
        note(step(limit, conn.read_response()).await.map(|_| ()), Some(n))?;
    }
    let data = step(limit, conn.read_response()).await;
    let all_refused = refusals.len() == rcpts;
    let mut refusals = refusals.into_iter();
    let first_error = match first_error {
        Some(first) => Some(first),
        None if all_refused => refusals.next(),
        None => None,
    };
    match (data, first_error) {
        (Ok(_), None) => Ok(refusals.collect()),
        (Ok(_), Some(first)) => Err(Envelope::InData(first)),
        (Err(error), None) => Err(Envelope::Refused(Failure { error, rcpt: None })),
        (Err(e), Some(first)) if is_reply(&e) => Err(Envelope::Refused(first)),
        (Err(error), Some(_)) => Err(Envelope::Refused(Failure { error, rcpt: None })),
    }
}

/// MAIL, every RCPT and DATA as the lines of one write.
pub(super) fn group(mail_from: Mail, rcpts: &[Rcpt]) -> Group {
    Group(
        std::iter::once(mail_from.to_string())
            .chain(rcpts.iter().map(ToString::to_string))
            .chain(std::iter::once(Data.to_string()))
            .collect(),
    )
}

/// Whether the error is the server's negative reply (the session still in
/// step), not a broken connection or a timeout.
pub(super) fn is_reply(e: &StepError) -> bool {
    matches!(e, StepError::Smtp(e) if e.is_permanent() || e.is_transient())
}

/// Several commands sent in one write (the lines of each, in order).
pub(super) struct Group(Vec<String>);

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|line| f.write_str(line))
    }
}

type LettreSmtpError = lettre::transport::smtp::Error;

pub(crate) enum StepError {
    Smtp(LettreSmtpError),
    Timeout(Duration),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Smtp(e) => write!(f, "{e}"),
            Self::Timeout(d) => write!(f, "no reply within {}", humantime::format_duration(*d)),
        }
    }
}

pub(crate) async fn step<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, LettreSmtpError>>,
) -> Result<T, StepError> {
    match timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StepError::Smtp(e)),
        Err(_) => Err(StepError::Timeout(limit)),
    }
}
