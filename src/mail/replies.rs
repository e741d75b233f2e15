//! What a failed send was ([`SendError`]) and what it means for its row
//! ([`classify`]), and what an SMTP reply or a broken connection says
//! beyond its code: that the relay throttles us (send less, the relay is
//! up), or that an address does not exist (put it on the suppression
//! list). `transaction` decides with these what a failed send was.

use crate::domain::{Delivery, InvoiceId};

type LettreSmtpError = lettre::transport::smtp::Error;

/// What happened to a message the server may or may not have.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Nothing was delivered (connection, greeting, MAIL, RCPT or DATA
    /// failed). `connect`: no connection could be made at all. `replied`:
    /// the server answered (a 4xx/5xx), so the connection itself is fine.
    #[error("not delivered: {reason}")]
    NotDelivered {
        reason: String,
        connect: bool,
        permanent: bool,
        replied: bool,
    },
    /// The server refused our login (AUTH): a configuration problem, not
    /// this message's.
    #[error("the SMTP server refused our login: {reason}")]
    LoginRefused { reason: String },
    /// Nothing was sent: the send was no longer allowed once a connection
    /// was ours (the lease was lost, shutdown began).
    #[error("not started")]
    NotStarted,
    /// The server refused a recipient for good as an address that does not
    /// exist (5.1.x at RCPT, or words to that effect): `reason` is its reply.
    #[error("the SMTP server rejected the address {address}: {reason}")]
    AddressRejected { address: String, reason: String },
    /// The server refuses us for now because we send too much or too fast
    /// (4.7.x, `421` on connect, "too many connections", "too much mail"):
    /// nothing was delivered, and the relay is up. See `pace`.
    #[error("throttled by the SMTP server: {reason}")]
    Throttled { reason: String },
    /// The server answered the message with a negative reply.
    #[error("refused by the SMTP server: {reason}")]
    Refused { reason: String, permanent: bool },
    /// The connection broke while the message was still being written:
    /// its end never left us, so the server does not have it.
    #[error("not delivered: {reason}")]
    Cut { reason: String },
    /// The message was handed over but no reply came: it may be delivered.
    #[error("delivery unknown: {reason}")]
    Unknown { reason: String },
}

impl SendError {
    /// No connection to the SMTP server could be made at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::NotDelivered { connect: true, .. })
    }
}

/// What a failed send means for its row: retried later, dropped for good,
/// or unknown. A send the server never answered before the end of the
/// message (unreachable, the connection broken or silent before the final
/// dot) is `Deferred`: no attempt used, as the server never had the
/// message to judge.
pub fn classify(invoice_id: &InvoiceId, e: SendError) -> Delivery {
    let error = e.to_string();
    match e {
        SendError::NotDelivered { connect: true, .. }
        | SendError::LoginRefused { .. }
        | SendError::Throttled { .. }
        | SendError::NotStarted => Delivery::Deferred { error },
        SendError::NotDelivered { replied: false, .. } | SendError::Cut { .. } => {
            tracing::warn!(%invoice_id, %error, "reminder not sent; it goes back unattempted");
            Delivery::Deferred { error }
        }
        SendError::NotDelivered {
            permanent: true, ..
        }
        | SendError::AddressRejected { .. }
        | SendError::Refused {
            permanent: true, ..
        } => {
            tracing::warn!(%invoice_id, %error, "reminder rejected permanently");
            Delivery::Discarded { error }
        }
        SendError::NotDelivered { .. } | SendError::Refused { .. } => {
            tracing::warn!(%invoice_id, %error, "reminder failed; will retry on a later tick");
            Delivery::Failed { error }
        }
        SendError::Unknown { .. } => {
            tracing::error!(%invoice_id, %error, "delivery unknown; the reminder stays 'sending' and is not retried");
            Delivery::Unknown { error }
        }
    }
}

/// Whether a transient reply says we send too much or too fast: the
/// words of [`SLOW_DOWN`] (docs/operating.md, "A relay that throttles").
/// A code alone is not enough: a 4.7.x is as often a policy refusal
/// ("450 4.7.1 Client host rejected"), which no wait would change and
/// which is that message's failure, and "421 4.3.2 Service not
/// available" is a relay going down, not one that wants less from us.
pub(super) fn throttles(e: &LettreSmtpError) -> bool {
    e.is_transient() && says_throttled(&e.to_string())
}

/// The words of a transient reply that say we are throttled.
pub(super) fn says_throttled(reply: &str) -> bool {
    let text = reply.to_ascii_lowercase();
    SLOW_DOWN.iter().any(|w| text.contains(w))
}

/// The words that mean "slow down" in a transient reply: Postfix's anvil
/// ("too much mail", "too many connections"), Office 365 ("too many
/// concurrent", "server busy"), Amazon SES ("throttling", "maximum
/// sending rate"), Gmail ("unusual rate"), and the common "rate limit",
/// "too many messages", "slow down".
pub const SLOW_DOWN: [&str; 10] = [
    "too many connections",
    "too many concurrent",
    "too much mail",
    "too many messages",
    "rate limit",
    "throttl",
    "sending rate",
    "unusual rate",
    "server busy",
    "slow down",
];

/// Whether a reply to RCPT says the address does not exist (so no later
/// mail to it can go either): a permanent reply with an enhanced status
/// code of class 5.1 about the recipient (5.1.1 no such mailbox, 5.1.2 no
/// such domain, 5.1.3 bad syntax, 5.1.6 moved, 5.1.10 null MX; 5.1.7 and
/// 5.1.8 are about the sender), or the words relays use for those without
/// one.
pub(super) fn rejects_the_address(e: &LettreSmtpError) -> bool {
    e.is_permanent() && says_the_address_is_gone(&e.to_string())
}

/// The words of a permanent reply that say the address does not exist.
fn says_the_address_is_gone(reply: &str) -> bool {
    let text = reply.to_ascii_lowercase();
    let coded = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|word| {
            word.strip_prefix("5.1.")
                .is_some_and(|detail| !detail.is_empty() && !matches!(detail, "7" | "8"))
        });
    const WORDS: [&str; 10] = [
        "user unknown",
        "unknown user",
        "no such user",
        "no such recipient",
        "no such mailbox",
        "mailbox not found",
        "mailbox does not exist",
        "address does not exist",
        "recipient not found",
        "unknown recipient",
    ];
    coded || WORDS.iter().any(|w| text.contains(w))
}

#[cfg(test)]
mod tests {
    use super::{says_the_address_is_gone, says_throttled};

    #[test]
    fn replies_that_say_we_send_too_much_are_throttling() {
        for throttled in [
            "transient error (450): 4.7.1 Error: too much mail from 127.0.0.1",
            "transient error (421): 4.7.0 relay.test Error: too many connections from 127.0.0.1",
            "transient error (452): Too many messages this hour",
            "transient error (451): Rate limit exceeded",
            "transient error (454): Throttling failure: Maximum sending rate exceeded.",
            "transient error (421): 4.7.28 Our system has detected an unusual rate of mail",
            "transient error (432): 4.3.2 Server busy. Please try again later",
        ] {
            assert!(says_throttled(throttled), "{throttled}");
        }
        for other in [
            "transient error (450): 4.2.1 mailbox busy",
            "transient error (421): 4.3.2 Service not available",
            "transient error (451): 4.3.0 temporary failure",
            "transient error (452): 4.3.1 insufficient system storage",
            "transient error (450): 4.7.1 Client host rejected: cannot find your hostname",
            "transient error (450): 4.7.1 <ada@x.test>: Recipient address rejected: try again later",
            "transient error (454): 4.7.0 TLS not available due to local problem",
        ] {
            assert!(!says_throttled(other), "{other}");
        }
    }

    #[test]
    fn replies_that_say_the_address_is_gone_are_told_from_others() {
        for gone in [
            "permanent error (550): 5.1.2 <gone.test>: Recipient address rejected: domain does not exist",
            "permanent error (550): 5.1.1 <ada@x.test>: Recipient address rejected",
            "permanent error (550): 5.1.10 null MX",
            "permanent error (550): User unknown in virtual mailbox table",
            "permanent error (550): No such user here",
        ] {
            assert!(says_the_address_is_gone(gone), "{gone}");
        }
        for other in [
            "permanent error (554): 5.7.1 <ada@x.test>: Relay access denied",
            "permanent error (553): 5.1.8 <we@us.test>: Sender address rejected",
            "permanent error (550): 5.1.7 bad sender mailbox",
            "permanent error (552): 5.3.4 message too big",
            "permanent error (550): 5.10.1 something else",
        ] {
            assert!(!says_the_address_is_gone(other), "{other}");
        }
    }
}
