//! Language tags, read one way everywhere: configuration checks
//! `templates.default_locale` with it, and mail picks each customer's
//! templates and number and date formats with it. Both sit above this
//! module.

use icu_locale_core::Locale;

/// Parses a BCP 47 tag; `de_CH` is accepted as `de-CH`.
pub fn parse_locale(tag: &str) -> Option<Locale> {
    tag.trim().replace('_', "-").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn underscores_in_tags_are_accepted() {
        assert_eq!(
            parse_locale("de_CH").map(|l| l.to_string()).as_deref(),
            Some("de-CH")
        );
        assert_eq!(parse_locale("not a tag!"), None);
    }
}
