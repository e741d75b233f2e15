//! Mail: building a reminder message ([`message`]) and handing it to the
//! SMTP server with an outcome we can trust ([`smtp`]).
//!
//! `mail` works on plain domain values (`crate::domain`); it never reads
//! the database and never decides what is owed.

pub mod message;
pub mod smtp;

pub use message::{MessageError, OutgoingMail, build_message, message_id};
pub use smtp::{Mailer, SendError, classify};
