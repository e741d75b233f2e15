//! The plain text a message is made of, and how long customer data may be
//! in it: the limits a name or an invoice number is cut to (by
//! [`sanitize`](crate::domain::sanitize)) before it reaches a header, a
//! subject or a greeting; and the files a message carries, as the body of
//! their part. Below it only `pdf`; templates, variables and message
//! building all sit above it.

use lettre::message::Body;
use lettre::message::header::ContentTransferEncoding;

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
    /// The base64 text of the file's first bytes, when other files share
    /// them ([`super::pdf::EncodedHead`]).
    pub encoded: Option<std::sync::Arc<super::pdf::EncodedHead>>,
}

impl Attachment {
    /// The file as a message part's body, in base64 as lettre writes it:
    /// a shared opening's text as it was made once, the rest encoded here.
    pub fn into_body(self) -> Body {
        let Some(head) = self.encoded else {
            return Body::new(self.bytes);
        };
        let Some(rest) = self.bytes.get(head.len..) else {
            return Body::new(self.bytes);
        };
        let rest_len = email_encoding::body::base64::encoded_len(rest.len());
        let mut text =
            String::with_capacity(head.base64.len().saturating_add(rest_len).saturating_add(2));
        text.push_str(&head.base64);
        if !rest.is_empty() {
            text.push_str("\r\n");
            if email_encoding::body::base64::encode(rest, &mut text).is_err() {
                return Body::new(self.bytes);
            }
        }
        Body::dangerous_pre_encoded(text.into_bytes(), ContentTransferEncoding::Base64)
    }
}
