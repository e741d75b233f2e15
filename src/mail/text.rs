//! The plain text a message is made of, and how long customer data may be
//! in it: the limits a name or an invoice number is cut to (by
//! [`sanitize`](crate::domain::sanitize)) before it reaches a header, a
//! subject or a greeting. A leaf of `mail`: templates, variables and
//! message building all sit above it.

/// Longest customer name we put in a header or greeting.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest invoice number we put in a subject.
pub const MAX_NUMBER_CHARS: usize = 64;
/// Longest subject, after rendering.
pub(super) const MAX_SUBJECT_CHARS: usize = 200;

/// A rendered reminder, ready to become a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// One line, whatever the data.
    pub subject: String,
    pub text: String,
    pub html: Option<String>,
    /// Files the message carries after its text (a late-payment letter).
    pub attachments: Vec<Attachment>,
}

/// A file a message carries: `application/pdf`, as the late-payment letter
/// is the only one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    pub bytes: Vec<u8>,
}
