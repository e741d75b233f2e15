//! Customer text made safe for one line: control characters stripped,
//! whitespace collapsed and the length limited, so a name, an invoice
//! number or a bad address quoted in a reason can never start a new header
//! or line, whatever the source holds.

/// Removes control characters (CR, LF, TAB, ...), collapses whitespace and
/// truncates, so user data is safe and short in a header or a line. One
/// pass, one allocation: it runs on every name and number of every message.
pub fn sanitize(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = 0usize;
    // Where the text is cut when it is too long: after `max_chars - 1`.
    let mut cut_at = None;
    let mut gap = false;
    for c in text.chars() {
        if c.is_control() || c.is_whitespace() {
            gap = !out.is_empty();
            continue;
        }
        if gap {
            push_counted(&mut out, ' ', &mut chars, &mut cut_at, max_chars);
            gap = false;
        }
        push_counted(&mut out, c, &mut chars, &mut cut_at, max_chars);
    }
    match cut_at {
        Some(at) if chars > max_chars => {
            out.truncate(at);
            out.push('…');
            out
        }
        _ => out,
    }
}

/// Appends `c`, counting characters and noting where `max_chars - 1` of
/// them end.
fn push_counted(
    out: &mut String,
    c: char,
    chars: &mut usize,
    cut_at: &mut Option<usize>,
    max_chars: usize,
) {
    if *chars == max_chars.saturating_sub(1) {
        cut_at.get_or_insert(out.len());
    }
    out.push(c);
    *chars = chars.saturating_add(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_removes_line_breaks_and_truncates() {
        assert_eq!(sanitize("Eve\r\nBcc: x@y", 100), "Eve Bcc: x@y");
        assert_eq!(sanitize("  a \t b  ", 100), "a b");
        assert_eq!(sanitize(&"n".repeat(500), 10).chars().count(), 10);
        assert_eq!(sanitize("abcdef", 4), "abc…");
        assert_eq!(sanitize("abcd", 4), "abcd");
        assert_eq!(sanitize("ab   cd", 4), "ab …");
        assert_eq!(sanitize(" \u{85}é\u{2003}ü\u{0}", 10), "é ü");
        assert_eq!(sanitize("", 10), "");
        assert_eq!(sanitize("abc", 0), "…");
    }

    /// The definition, written the obvious way (three passes).
    fn sanitize_by_definition(text: &str, max_chars: usize) -> String {
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

    #[test]
    fn sanitize_in_one_pass_is_the_definition() {
        let pieces = [
            "a", "é", " ", "\t", "\r\n", "\u{85}", "\u{2003}", "\u{0}", "Ω", "-",
        ];
        // Every string of up to 5 pieces, cut at every length up to 7.
        let mut texts = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = texts
                .iter()
                .filter(|t| t.chars().count() < 5)
                .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
                .collect();
            texts.extend(longer);
            texts.sort();
            texts.dedup();
        }
        for text in &texts {
            for max in 0..7 {
                assert_eq!(
                    sanitize(text, max),
                    sanitize_by_definition(text, max),
                    "{text:?} at {max}"
                );
            }
        }
    }
}
