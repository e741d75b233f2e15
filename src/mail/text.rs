//! The plain text a message is made of, and how customer data is made safe
//! in it: control characters stripped and lengths limited before a name or
//! an invoice number reaches a header, a subject or a greeting. A leaf of
//! `mail`: templates, variables and message building all sit above it.

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
}

/// Removes control characters (CR, LF, TAB, ...), collapses whitespace and
/// truncates, so user data is safe and short in a header or a line.
pub fn sanitize(text: &str, max_chars: usize) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let collapsed = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > max_chars {
        let mut cut: String = collapsed
            .chars()
            .take(max_chars.saturating_sub(1))
            .collect();
        cut.push('…');
        cut
    } else {
        collapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_removes_line_breaks_and_truncates() {
        assert_eq!(sanitize("Eve\r\nBcc: x@y", 100), "Eve Bcc: x@y");
        assert_eq!(sanitize("  a \t b  ", 100), "a b");
        assert_eq!(sanitize(&"n".repeat(500), 10).chars().count(), 10);
    }
}
