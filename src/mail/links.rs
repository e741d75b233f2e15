//! Links in mail: the payment link a reminder shows.
//!
//! Guarantees: a link reaches a message (the HTML `href` and the text)
//! only as an absolute `http` or `https` URL, as the `url` crate
//! normalizes it, and only with the path it was written with; anything
//! else (`javascript:`, `data:`, relative, unparsable, or a path with a
//! `.` or `..` step) is dropped by the caller, with a warning naming the
//! invoice. `company.payment_url` is a template of its own, rendered in an
//! environment where every value it interpolates is percent-encoded (all
//! but `A-Z a-z 0-9 - . _ ~`), so an invoice number with a space, `/`, `?`
//! or `#` stays one path segment or query value (`../x` is the segment
//! `..%2Fx`); `urlencode` encodes the same way, once, and `safe` opts a
//! value out. A value that is a whole segment `.` or `..` cannot be kept:
//! every URL parser (browsers' too, by the WHATWG URL standard) resolves
//! it, and `%2E` / `%2E%2E` alike, as a step up or in place, so the link
//! would point at another page; such a link is dropped instead.

use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, Error, UndefinedBehavior};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::filters::add_filters;
use super::format::Formats;

/// The name `company.payment_url` is compiled under (and named by in errors).
pub(super) const PAYMENT_URL: &str = "company.payment_url";

/// What an interpolated value keeps as is: RFC 3986's unreserved characters.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(text: &str) -> String {
    utf8_percent_encode(text, ENCODED).to_string()
}

/// `text` as an absolute `http` or `https` URL with a host, normalized by
/// the `url` crate (a space becomes `%20`); None for anything else, and
/// for a path with a dot step, which parsing would resolve away.
pub(super) fn http_url(text: &str) -> Option<String> {
    if has_dot_step(text) {
        return None;
    }
    let url = url::Url::parse(text.trim()).ok()?;
    let web = matches!(url.scheme(), "http" | "https");
    (web && url.host_str().is_some_and(|h| !h.is_empty())).then(|| url.into())
}

/// Whether the path of `text` (an absolute URL) has a `.` or `..` segment,
/// as the WHATWG URL standard reads one: tabs and newlines removed, `\`
/// as `/`, `%2e` in any case as a dot.
fn has_dot_step(text: &str) -> bool {
    let text: String = text
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let Some((_, rest)) = text.split_once("://") else {
        return false;
    };
    let Some(start) = rest.find(['/', '\\', '?', '#']) else {
        return false;
    };
    let path = rest[start..].split(['?', '#']).next().unwrap_or_default();
    path.split(['/', '\\']).any(|segment| {
        let dots = segment.to_ascii_lowercase().replace("%2e", ".");
        dots == "." || dots == ".."
    })
}

/// The `company.payment_url` template.
pub(super) struct PaymentUrlTemplate {
    env: Environment<'static>,
}

impl PaymentUrlTemplate {
    pub(super) fn new(source: &str, formats: Formats) -> Result<Self, Error> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        add_filters(&mut env, formats);
        env.set_formatter(|out, _state, value| {
            let shown = if value.is_safe() {
                value.to_string()
            } else {
                encode(&value.to_string())
            };
            out.write_str(&shown).map_err(Error::from)
        });
        // minijinja's own `urlencode` keeps '/' and would be encoded again.
        env.add_filter("urlencode", urlencode);
        env.add_template_owned(PAYMENT_URL, source.to_owned())?;
        Ok(Self { env })
    }

    /// The link for one reminder (`vars`: its [`Vars`](super::vars::Vars)),
    /// trimmed; checked by the caller.
    pub(super) fn render(&self, vars: impl serde::Serialize) -> Result<String, Error> {
        let rendered = self.env.get_template(PAYMENT_URL)?.render(vars)?;
        Ok(rendered.trim().to_owned())
    }
}

/// `urlencode` for the payment URL: a value percent-encoded like every
/// other (a map becomes `k=v&k=v`), marked safe so it is encoded once.
fn urlencode(value: &Value) -> Result<Value, Error> {
    let text = match value.kind() {
        ValueKind::Undefined | ValueKind::None => String::new(),
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                if !(item.is_none() || item.is_undefined()) {
                    pairs.push(format!(
                        "{}={}",
                        encode(&key.to_string()),
                        encode(&item.to_string())
                    ));
                }
            }
            pairs.join("&")
        }
        _ => encode(&value.to_string()),
    };
    Ok(Value::from_safe_string(text))
}

/// Something to show of a dropped link in a log line: at most 100
/// characters (it is the source's data).
pub(super) fn shown(link: &str) -> String {
    let mut shown: String = link.chars().take(100).collect();
    if shown.len() < link.len() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_http_and_https_urls_are_links() {
        for bad in [
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            "data:text/html,<script>alert(1)</script>",
            "/pay/7",
            "pay/7",
            "//evil.example/x",
            "mailto:a@b.c",
            "ftp://files.example/x",
            "https://",
            "pay me: now",
            "",
        ] {
            assert_eq!(http_url(bad), None, "{bad}");
        }
        assert_eq!(
            http_url(" https://pay.example.com/i/42?x=1 ").as_deref(),
            Some("https://pay.example.com/i/42?x=1")
        );
        assert_eq!(
            http_url("http://pay.example.com").as_deref(),
            Some("http://pay.example.com/")
        );
        assert_eq!(
            http_url("https://pay.example.com/INV 7").as_deref(),
            Some("https://pay.example.com/INV%207")
        );
    }

    #[test]
    fn a_path_with_a_dot_step_is_no_link_but_dots_within_a_segment_are() {
        for stepping in [
            "https://pay.example.com/i/..",
            "https://pay.example.com/i/./pay",
            "https://pay.example.com/i/%2E%2E?x=1",
            "https://pay.example.com/i/.%2e/pay",
            "https://pay.example.com/i/%2e",
            "https://pay.example.com/i\\..\\x",
            "https://pay.example.com/i/.\t./x",
        ] {
            assert_eq!(http_url(stepping), None, "{stepping}");
        }
        for kept in [
            "https://pay.example.com/i/..%2Fx",
            "https://pay.example.com/i/...",
            "https://pay.example.com/i/INV.7",
            "https://pay.example.com/i/7?back=..",
            "https://pay.example.com/i/7#..",
        ] {
            assert!(http_url(kept).is_some(), "{kept}");
        }
    }

    fn render(template: &str) -> String {
        let number = "INV 7/8?#&%é";
        PaymentUrlTemplate::new(template, Formats::default())
            .unwrap()
            .render(minijinja::context! { invoice => minijinja::context! { number, id => 42 } })
            .unwrap()
    }

    #[test]
    fn every_interpolated_value_is_percent_encoded_once() {
        let encoded = "INV%207%2F8%3F%23%26%25%C3%A9";
        assert_eq!(
            render("https://pay.example.com/i/{{ invoice.number }}"),
            format!("https://pay.example.com/i/{encoded}")
        );
        assert_eq!(
            render(
                "https://pay.example.com/i/{{ invoice.number | urlencode }}?id={{ invoice.id }}"
            ),
            format!("https://pay.example.com/i/{encoded}?id=42")
        );
        assert_eq!(
            render("https://pay.example.com/?{{ {'n': invoice.number} | urlencode }}"),
            format!("https://pay.example.com/?n={encoded}")
        );
        assert_eq!(
            render("https://pay.example.com/{{ 'a/b' | safe }}"),
            "https://pay.example.com/a/b"
        );
        assert_eq!(
            render("  https://pay.example.com/{{ invoice.number | lower }}\n"),
            "https://pay.example.com/inv%207%2F8%3F%23%26%25%C3%A9"
        );
    }

    #[test]
    fn invoice_numbers_that_are_dot_steps_make_no_link_and_a_slash_stays_in_its_segment() {
        let link = |number: &str| {
            let rendered = PaymentUrlTemplate::new(
                "https://pay.example.com/i/{{ invoice.number }}/pay",
                Formats::default(),
            )
            .unwrap()
            .render(minijinja::context! { invoice => minijinja::context! { number } })
            .unwrap();
            http_url(&rendered)
        };
        assert_eq!(link("."), None);
        assert_eq!(link(".."), None);
        assert_eq!(
            link("../x").as_deref(),
            Some("https://pay.example.com/i/..%2Fx/pay")
        );
        assert_eq!(
            link("a b?#").as_deref(),
            Some("https://pay.example.com/i/a%20b%3F%23/pay")
        );
    }
}
