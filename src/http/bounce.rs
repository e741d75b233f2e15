//! What a bounce webhook's body says, read without trusting it: our own
//! body (`{"address": ..., "kind": ..., "detail": ...}`) or a Postmark
//! bounce webhook body (`Email`, `Type`, `Details`), each mapped to one
//! [`BounceKind`]. Anything else is a [`BodyError`] (the request gets 400),
//! never a panic; the address must parse, and the detail is cleaned of
//! control characters and cut to [`MAX_DETAIL_CHARS`] before it is stored.

use serde_json::Value;

use crate::domain::sanitize;

/// The longest `detail` kept.
pub const MAX_DETAIL_CHARS: usize = 500;

/// What happened to mail sent to an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BounceKind {
    /// The address does not exist: suppressed.
    HardBounce,
    /// The recipient marked a reminder as spam: suppressed.
    Complaint,
    /// The recipient asked for no more mail: suppressed.
    Unsubscribe,
    /// A temporary failure (mailbox full, greylisted, an auto-reply):
    /// logged and ignored.
    Transient,
}

impl BounceKind {
    /// The `kind` of our body, and the `reason` stored on the list.
    pub fn label(self) -> &'static str {
        match self {
            Self::HardBounce => "hard_bounce",
            Self::Complaint => "complaint",
            Self::Unsubscribe => "unsubscribe",
            Self::Transient => "soft_bounce",
        }
    }

    /// Whether the address goes on the suppression list.
    pub fn suppresses(self) -> bool {
        !matches!(self, Self::Transient)
    }

    fn from_ours(kind: &str) -> Option<Self> {
        match kind {
            "hard_bounce" => Some(Self::HardBounce),
            "complaint" => Some(Self::Complaint),
            "unsubscribe" => Some(Self::Unsubscribe),
            "soft_bounce" => Some(Self::Transient),
            _ => None,
        }
    }

    /// Postmark's bounce `Type`s: those after which Postmark itself stops
    /// sending to the address are hard; every other type (`SoftBounce`,
    /// `Transient`, `DnsError`, `AutoResponder`, ...) is transient.
    fn from_postmark(kind: &str) -> Self {
        match kind {
            "HardBounce" | "BadEmailAddress" | "ManuallyDeactivated" => Self::HardBounce,
            "SpamComplaint" => Self::Complaint,
            "Unsubscribe" => Self::Unsubscribe,
            _ => Self::Transient,
        }
    }
}

/// Which body it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    Ours,
    Postmark,
}

impl BodyFormat {
    /// The `source` stored on the list.
    pub fn source(self) -> &'static str {
        match self {
            Self::Ours => "webhook",
            Self::Postmark => "postmark",
        }
    }
}

/// One bounce, as read from a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounce {
    pub address: String,
    pub kind: BounceKind,
    pub detail: Option<String>,
    pub format: BodyFormat,
    /// Postmark's own `Type` (`SoftBounce`), for the log.
    pub original_type: Option<String>,
}

/// Why a body cannot be read (answered 400, with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("the body is not a JSON object")]
    NotJson,
    #[error(
        "the body is neither {{\"address\", \"kind\", \"detail\"}} nor a Postmark bounce (Email, Type)"
    )]
    UnknownShape,
    #[error("{0} must be a string")]
    NotAString(&'static str),
    #[error("kind must be one of hard_bounce, complaint, unsubscribe, soft_bounce")]
    UnknownKind,
    #[error("the address is not an email address")]
    BadAddress,
}

/// Reads a bounce from `body`.
pub fn parse(body: &[u8]) -> Result<Bounce, BodyError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| BodyError::NotJson)?;
    let object = value.as_object().ok_or(BodyError::NotJson)?;
    let (format, address, kind, detail, original_type) = if object.contains_key("address") {
        let kind = text(object.get("kind"), "kind")?.ok_or(BodyError::UnknownKind)?;
        (
            BodyFormat::Ours,
            text(object.get("address"), "address")?,
            BounceKind::from_ours(kind).ok_or(BodyError::UnknownKind)?,
            text(object.get("detail"), "detail")?,
            None,
        )
    } else if object.contains_key("Email") && object.contains_key("Type") {
        let kind = text(object.get("Type"), "Type")?.unwrap_or_default();
        let details = text(object.get("Details"), "Details")?.filter(|d| !d.trim().is_empty());
        let detail = match details {
            Some(d) => Some(d),
            None => text(object.get("Description"), "Description")?,
        };
        (
            BodyFormat::Postmark,
            text(object.get("Email"), "Email")?,
            BounceKind::from_postmark(kind),
            detail,
            Some(kind.to_owned()),
        )
    } else {
        return Err(BodyError::UnknownShape);
    };
    let address = address.map(str::trim).ok_or(BodyError::BadAddress)?;
    let address: lettre::Address = address.parse().map_err(|_| BodyError::BadAddress)?;
    Ok(Bounce {
        address: address.to_string(),
        kind,
        detail: detail
            .map(|d| sanitize(d, MAX_DETAIL_CHARS))
            .filter(|d| !d.is_empty()),
        format,
        original_type: original_type.map(|t| sanitize(&t, 50)),
    })
}

/// A field that must be a string when present (null counts as absent).
fn text<'v>(value: Option<&'v Value>, name: &'static str) -> Result<Option<&'v str>, BodyError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BodyError::NotAString(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_body_is_read_with_its_kind() {
        let b =
            parse(br#"{"address":"Ada@Example.com","kind":"complaint","detail":"abuse\nreport"}"#);
        assert_eq!(
            b,
            Ok(Bounce {
                address: "Ada@Example.com".into(),
                kind: BounceKind::Complaint,
                detail: Some("abuse report".into()),
                format: BodyFormat::Ours,
                original_type: None,
            })
        );
    }

    #[test]
    fn an_unknown_kind_or_a_bad_address_or_not_json_is_a_body_error() {
        assert_eq!(
            parse(br#"{"address":"a@b.c","kind":"maybe"}"#),
            Err(BodyError::UnknownKind)
        );
        assert_eq!(
            parse(br#"{"address":"nope","kind":"hard_bounce"}"#),
            Err(BodyError::BadAddress)
        );
        assert_eq!(
            parse(br#"{"address":7,"kind":"hard_bounce"}"#),
            Err(BodyError::NotAString("address"))
        );
        assert_eq!(parse(b"\xff\xfe"), Err(BodyError::NotJson));
        assert_eq!(parse(b"[1]"), Err(BodyError::NotJson));
        assert_eq!(parse(br#"{"hello":1}"#), Err(BodyError::UnknownShape));
    }

    #[test]
    fn postmark_types_map_to_kinds_and_soft_bounces_are_transient() {
        for (t, kind) in [
            ("HardBounce", BounceKind::HardBounce),
            ("SpamComplaint", BounceKind::Complaint),
            ("Unsubscribe", BounceKind::Unsubscribe),
            ("SoftBounce", BounceKind::Transient),
            ("Transient", BounceKind::Transient),
        ] {
            let body = format!(r#"{{"Type":"{t}","Email":"x@example.com","Details":""}}"#);
            let b = parse(body.as_bytes()).map(|b| (b.kind, b.format));
            assert_eq!(b, Ok((kind, BodyFormat::Postmark)), "{t}");
        }
        assert!(!BounceKind::Transient.suppresses());
    }
}
