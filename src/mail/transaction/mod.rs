//! One SMTP transaction, and what we know after it fails.
//!
//! The one thing the job must know after a failure is *whether the server
//! might have accepted the message*, and RFC 5321 answers it: the server
//! has the message once it read the final dot, and only its reply can say
//! it did not take it. So:
//! * connecting, EHLO, STARTTLS, AUTH, MAIL, RCPT or DATA failing (network
//!   error, timeout or a 4xx/5xx reply) means nothing was delivered:
//!   [`SendError::NotDelivered`] (a retry is safe);
//! * so does a connection that breaks while the message is still being
//!   written (a write that fails, or a deadline that passes, before the
//!   final dot has left us): [`SendError::Cut`], which goes back
//!   unattempted to the next tick;
//! * a 4xx/5xx reply to the end of the message means it was refused:
//!   [`SendError::Refused`], transient or permanent;
//! * any other failure once the final dot has left us (a reset, an EOF, a
//!   read error, no reply within the deadline) is [`SendError::Unknown`]:
//!   the server may have accepted it. We never retry those (at-most-once);
//!   the row stays `sending` and `audit` lists it. Whether the dot has
//!   left us is the connection's [`Written`]; a connection without one
//!   (implicit TLS) counts every failure after the message began as
//!   unknown.
//!
//! With a server that offers PIPELINING (RFC 2920), MAIL, every RCPT and
//! DATA go out in one write and their replies are read in order: two round
//! trips per message instead of three plus one per recipient, and one when
//! the next message's envelope rides on this one's end ([`Turn::next`],
//! `ride`). The body is sent only after all of them were accepted; if DATA
//! was accepted but an earlier command was not, the connection is dropped
//! without a body (the server then delivers nothing).
//!
//! On success the server's final reply to the message (`250 2.0.0 Ok:
//! queued as 4F3X2`) is kept as [`Accepted::reply`]: the proof of
//! acceptance stored on the row.
//!
//! [`classify`](super::replies::classify) turns each of these into the
//! [`Delivery`](crate::domain::Delivery) that is recorded.

use std::time::Duration;

use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::commands::{Mail, Rcpt};
use lettre::transport::smtp::extension::{Extension, MailBodyParameter, MailParameter};

mod envelope;

use envelope::{
    Envelope, Failure, envelope_replies, group, is_reply, pipelined_envelope, stepwise_envelope,
};
pub(super) use envelope::{StepError, step};

use super::OutgoingMail;
use super::replies::{SendError, rejects_the_address, throttles};
use super::written::{OnWritten, Written};

/// The server took the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Its final reply to the message, code and text: `250 2.0.0 Ok: queued
    /// as 4F3X2` (the lines of a multi-line reply joined by spaces).
    pub reply: String,
    /// Recipients it refused at RCPT while taking the message for the
    /// others (a statement to several addresses).
    pub refused: Vec<RefusedRecipient>,
}

/// A recipient the relay refused while it took the message for others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRecipient {
    pub address: String,
    /// Its reply to RCPT.
    pub reply: String,
    /// The reply says the address does not exist (see `replies`).
    pub gone: bool,
}

impl Accepted {
    fn from_response(response: &lettre::transport::smtp::response::Response) -> Self {
        let text: Vec<&str> = response.message().map(str::trim).collect();
        let code = response.code();
        Self {
            reply: if text.is_empty() {
                code.to_string()
            } else {
                format!("{code} {}", text.join(" "))
            },
            refused: Vec::new(),
        }
    }
}

/// How one transaction's envelope goes on its connection, and what rides
/// on its message's end.
pub(super) struct Turn<'a> {
    /// The server offered PIPELINING (RFC 2920) on this connection.
    pub pipelining: bool,
    /// The send before this one wrote this message's envelope after its
    /// own message's end ([`rider_envelope`]): only its replies are read.
    pub envelope_written: bool,
    /// Asked once, just before the message's end is written, on a
    /// pipelining connection: the envelope of the next message, written
    /// in the same write (RFC 2920 lets a group begin with a message's
    /// content). Its replies follow this message's and are read by that
    /// next message's own transaction.
    pub next: Option<&'a mut (dyn FnMut() -> Option<String> + Send)>,
}

/// One SMTP transaction on `conn`, each step within `limit`. Says whether
/// the connection can be reused (success, or MAIL/RCPT refused and the
/// session reset). `written` watches the connection's writes; `on_written`
/// is called once the message's end has left us (never, if it does not;
/// it is dropped when the transaction ends).
pub(super) async fn transact(
    conn: &mut AsyncSmtpConnection,
    written: Option<&Written>,
    on_written: Option<OnWritten>,
    turn: Turn<'_>,
    mail: &OutgoingMail,
    limit: Duration,
) -> (Result<Accepted, SendError>, bool) {
    if let Some(w) = written {
        w.reset();
    }
    let outcome = transact_watched(conn, written, on_written, turn, mail, limit).await;
    if let Some(w) = written {
        w.reset();
    }
    outcome
}

/// The envelope of `mail` as the next message's, written after another
/// message's end on the same connection; None when it cannot ride (an
/// address that is not ASCII needs the server's SMTPUTF8, which only the
/// send on its own connection checks).
pub(super) fn rider_envelope(mail: &OutgoingMail) -> Option<String> {
    if needs_utf8(mail) {
        return None;
    }
    let (mail_from, rcpts) = envelope_of(mail, false);
    Some(group(mail_from, &rcpts).to_string())
}

fn needs_utf8(mail: &OutgoingMail) -> bool {
    mail.envelope
        .from()
        .is_some_and(|a| !AsRef::<str>::as_ref(a).is_ascii())
        || mail
            .envelope
            .to()
            .iter()
            .any(|a| !AsRef::<str>::as_ref(a).is_ascii())
}

/// MAIL (with SMTPUTF8 when `utf8`, 8BITMIME for a body that is not
/// ASCII) and one RCPT per recipient.
fn envelope_of(mail: &OutgoingMail, utf8: bool) -> (Mail, Vec<Rcpt>) {
    let mut params = Vec::new();
    if utf8 {
        params.push(MailParameter::SmtpUtfEight);
    }
    if !mail.bytes.is_ascii() {
        params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
    }
    let mail_from = Mail::new(mail.envelope.from().cloned(), params);
    let rcpts = mail
        .envelope
        .to()
        .iter()
        .map(|to| Rcpt::new(to.clone(), vec![]))
        .collect();
    (mail_from, rcpts)
}

async fn transact_watched(
    conn: &mut AsyncSmtpConnection,
    written: Option<&Written>,
    on_written: Option<OnWritten>,
    turn: Turn<'_>,
    mail: &OutgoingMail,
    limit: Duration,
) -> (Result<Accepted, SendError>, bool) {
    // A 4.7.x on one RCPT is that recipient's transient failure (Postfix's
    // greylisting, a recipient's rate); on MAIL or the session it is the
    // relay throttling us.
    let before_data = |e: StepError, at_rcpt: bool| match e {
        StepError::Smtp(e) if !at_rcpt && throttles(&e) => SendError::Throttled {
            reason: e.to_string(),
        },
        StepError::Smtp(e) if e.is_permanent() || e.is_transient() => SendError::NotDelivered {
            reason: e.to_string(),
            connect: false,
            permanent: e.is_permanent(),
            replied: true,
        },
        other => SendError::NotDelivered {
            reason: other.to_string(),
            connect: false,
            permanent: false,
            replied: false,
        },
    };
    let utf8 = needs_utf8(mail);
    if utf8 && !conn.server_info().supports_feature(Extension::SmtpUtfEight) {
        let e = SendError::NotDelivered {
            reason: "the address is not ASCII and the server does not support SMTPUTF8".into(),
            connect: false,
            permanent: true,
            replied: true,
        };
        return (Err(e), true);
    }
    let Turn {
        pipelining,
        envelope_written,
        next,
    } = turn;
    let envelope = if envelope_written {
        // Written by the send before ours: its replies only.
        let first = step(limit, conn.read_response()).await.map(|_| ());
        envelope_replies(conn, first, mail.envelope.to().len(), limit).await
    } else {
        let (mail_from, rcpts) = envelope_of(mail, utf8);
        if pipelining {
            pipelined_envelope(conn, mail_from, &rcpts, limit).await
        } else {
            stepwise_envelope(conn, mail_from, &rcpts, limit).await
        }
    };
    let rejected = |f: &Failure| {
        let to = mail.envelope.to().get(f.rcpt?)?;
        match &f.error {
            StepError::Smtp(e) if rejects_the_address(e) => Some(SendError::AddressRejected {
                address: to.to_string(),
                reason: e.to_string(),
            }),
            _ => None,
        }
    };
    let refused: Vec<RefusedRecipient> = match envelope {
        Ok(refused) => refused
            .into_iter()
            .filter_map(|f| {
                let to = mail.envelope.to().get(f.rcpt?)?;
                Some(RefusedRecipient {
                    address: to.to_string(),
                    reply: f.error.to_string(),
                    gone: matches!(&f.error, StepError::Smtp(e) if rejects_the_address(e)),
                })
            })
            .collect(),
        Err(Envelope::Refused(f)) => {
            let e = rejected(&f).unwrap_or_else(|| before_data(f.error, f.rcpt.is_some()));
            // After a refused MAIL/RCPT the server expects a reset; a
            // connection that answered is still good once it is reset.
            // A throttled session is closed: relays slow down or drop a
            // session that collects refusals (Postfix's error sleep), and
            // the pacer's probe is better asked on a fresh one.
            let reusable = matches!(
                e,
                SendError::NotDelivered { replied: true, .. } | SendError::AddressRejected { .. }
            ) && step(limit, conn.command(lettre::transport::smtp::commands::Rset))
                .await
                .is_ok();
            return (Err(e), reusable);
        }
        Err(Envelope::InData(f)) => {
            return (
                Err(rejected(&f).unwrap_or_else(|| before_data(f.error, f.rcpt.is_some()))),
                false,
            );
        }
    };

    // From here on the server has (part of) the message: its content,
    // dot-stuffed, and the final CRLF "." CRLF in one write (lettre's own
    // `message` writes them separately, a segment and a wakeup of the
    // server more per message). The message's own last CRLF is the first
    // half of the end marker, so the server receives exactly `mail.bytes`
    // (the bytes hashed for the proof), not one empty line more.
    let data = mail.bytes.strip_suffix(b"\r\n").unwrap_or(&mail.bytes);
    // Unwatched, `on_written` lives until the transaction ends: the reply
    // is the first sign the end has left us.
    let _unwatched = match written {
        Some(w) => {
            w.arm(on_written);
            None
        }
        None => on_written,
    };
    let sent = match std::str::from_utf8(data) {
        Ok(text) => {
            let rider = next.filter(|_| pipelining).and_then(|next| next());
            let content = Content(text, rider.as_deref().unwrap_or_default());
            step(limit, conn.command(content)).await
        }
        Err(_) => step(limit, conn.message(data)).await,
    };
    let sent = match sent {
        // The deadline passed, but the reply may be waiting in the socket:
        // a process stopped (SIGSTOP, a frozen VM) and resumed sees its
        // timers fire before its sockets' readiness, and a reply that
        // arrived meanwhile is read now rather than called unknown.
        Err(StepError::Timeout(_)) => match step(LAST_LOOK, conn.read_response()).await {
            Ok(response) => Ok(response),
            Err(_) => sent,
        },
        other => other,
    };
    let after_the_end = written.is_none_or(Written::written);
    match sent {
        Ok(response) => {
            let accepted = Accepted {
                refused,
                ..Accepted::from_response(&response)
            };
            (Ok(accepted), true)
        }
        Err(e) if !after_the_end && !is_reply(&e) => (
            Err(SendError::Cut {
                reason: format!("the connection broke before the end of the message left us: {e}"),
            }),
            false,
        ),
        // Refused for now because we send too much: nothing was accepted.
        Err(StepError::Smtp(e)) if throttles(&e) => (
            Err(SendError::Throttled {
                reason: e.to_string(),
            }),
            false,
        ),
        Err(StepError::Smtp(e)) if e.is_permanent() || e.is_transient() => {
            let refused = SendError::Refused {
                reason: e.to_string(),
                permanent: e.is_permanent(),
            };
            // Some servers end the session after refusing a message; a new
            // connection is cheaper than finding out by a timeout.
            (Err(refused), false)
        }
        Err(other) => (
            Err(SendError::Unknown {
                reason: other.to_string(),
            }),
            false,
        ),
    }
}

/// How long a reply that missed its deadline is looked for once more.
const LAST_LOOK: Duration = Duration::from_millis(200);

/// A message's content after DATA's 354, as one write: every line that
/// starts with "." gets another (RFC 5321 4.5.2, as lettre's own codec
/// does), then CRLF "." CRLF, then the next message's envelope if one
/// rides on it. Written in runs between the lines that need the extra dot
/// (most messages have none), not line by line.
struct Content<'a>(&'a str, &'a str);

impl std::fmt::Display for Content<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0;
        if text.starts_with('.') {
            f.write_str(".")?;
        }
        let mut from = 0;
        for at in memchr::memmem::find_iter(text.as_bytes(), b"\r\n.") {
            // Through the CRLF, then the added dot; the line's own dot
            // starts the next run. `at + 2` is a char boundary: CR and LF
            // are ASCII.
            let end = at.saturating_add(2);
            f.write_str(text.get(from..end).unwrap_or_default())?;
            f.write_str(".")?;
            from = end;
        }
        f.write_str(text.get(from..).unwrap_or_default())?;
        f.write_str("\r\n.\r\n")?;
        f.write_str(self.1)
    }
}

#[cfg(test)]
mod tests {
    use super::Content;

    #[test]
    fn content_lines_starting_with_a_dot_get_another_and_the_end_marker_follows() {
        let wire = |s: &str| Content(s, "").to_string();
        assert_eq!(wire("a\r\n.b\r\nc"), "a\r\n..b\r\nc\r\n.\r\n");
        assert_eq!(wire(".first"), "..first\r\n.\r\n");
        assert_eq!(wire("a\r\n.\r\nb"), "a\r\n..\r\nb\r\n.\r\n");
        assert_eq!(wire("a\r\n\r\n..x"), "a\r\n\r\n...x\r\n.\r\n");
        // A dot after a bare LF starts no SMTP line: left as it is.
        assert_eq!(wire("x.y\n.z"), "x.y\n.z\r\n.\r\n");
        assert_eq!(wire(""), "\r\n.\r\n");
    }
}
