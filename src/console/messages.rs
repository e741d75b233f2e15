//! An invoice's archived messages: `GET /invoices/{id}/messages/{message_id}`
//! serves the HTML part in a sandboxed frame under a CSP of its own (no
//! script, nothing fetched, framed by the console only), and `.../raw` the
//! raw bytes as `.eml`, `.../letters/{name}` a PDF letter it carried. A
//! message is served only for a Message-ID of that
//! invoice's reminders; any other answers 404.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse as _;

use mail_parser::MimeHeaders as _;

use super::App;
use super::failure::{Failure, Page, failed};
use super::pages;
use crate::domain::InvoiceId;
use crate::operator::archive::{Archived, ArchivedMessage};

/// The archived message as the page shows it.
#[derive(Debug, serde::Serialize)]
pub(super) struct Message {
    message_id: String,
    sha256: String,
    archived: String,
    text: Option<String>,
    has_html: bool,
    /// The file names of the PDF letters it carries.
    letters: Vec<String>,
}

/// The PDF files `parsed` carries, by name.
fn pdfs<'a>(parsed: &'a mail_parser::Message<'a>) -> impl Iterator<Item = (String, &'a [u8])> + 'a {
    parsed.attachments().filter_map(|part| {
        let pdf = part
            .content_type()
            .is_some_and(|t| t.ctype() == "application" && t.subtype() == Some("pdf"));
        let name = part.attachment_name()?.to_owned();
        pdf.then(|| (name, part.contents()))
    })
}

/// The archived message's parts for the page.
pub(super) fn shown(app: &App, m: &ArchivedMessage) -> Message {
    let parsed = mail_parser::MessageParser::default().parse(&m.bytes);
    let text = parsed
        .as_ref()
        .and_then(|p| p.body_text(0))
        .map(|t| t.into_owned());
    let has_html = parsed.as_ref().is_some_and(|p| {
        p.html_body
            .first()
            .and_then(|i| p.part(*i))
            .is_some_and(|part| matches!(part.body, mail_parser::PartType::Html(_)))
    });
    let letters = parsed
        .as_ref()
        .map(|p| pdfs(p).map(|(name, _)| name).collect())
        .unwrap_or_default();
    Message {
        message_id: m.message_id.clone(),
        sha256: hex(&m.sha256),
        archived: pages::when(app, m.archived_at),
        text,
        has_html,
        letters,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The archived message `message_id` of invoice `id`, if it is one of the
/// invoice's and in the archive; otherwise the answer to give.
async fn archived_of(app: &App, id: &str, message_id: &str) -> Result<ArchivedMessage, Failure> {
    let not_found = || Failure::NotFound(format!("Message <{message_id}> of invoice {id}"));
    match app
        .desk()
        .archived_of(&InvoiceId::from(id), message_id)
        .await
        .map_err(failed("read the message archive"))?
    {
        Some(Archived::Kept(m)) => Ok(m),
        None | Some(Archived::NotKept(_)) => Err(not_found()),
        Some(Archived::Damaged(why)) => {
            Err(failed("read an archived message")(anyhow::anyhow!(why)))
        }
    }
}

/// `GET /invoices/{id}/messages/{message_id}`: the HTML part as stored,
/// under `pages::MAIL_FRAME_CSP`.
pub async fn message_html(
    State(app): State<App>,
    Path((id, message_id)): Path<(String, String)>,
) -> Page {
    let m = archived_of(&app, &id, &message_id).await?;
    let parsed = mail_parser::MessageParser::default().parse(&m.bytes);
    let Some(html) = parsed
        .as_ref()
        .and_then(|p| p.body_html(0))
        .map(|h| h.into_owned())
    else {
        return Err(Failure::NotFound(format!("An HTML part in <{message_id}>")));
    };
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, pages::MAIL_FRAME_CSP),
        ],
        html,
    )
        .into_response())
}

/// `GET /invoices/{id}/messages/{message_id}/raw`: the message exactly as
/// sent, as a `.eml` download.
pub async fn message_raw(
    State(app): State<App>,
    Path((id, message_id)): Path<(String, String)>,
) -> Page {
    let m = archived_of(&app, &id, &message_id).await?;
    let file: String = message_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "@.-_+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "message/rfc822".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}.eml\""),
            ),
        ],
        m.bytes,
    )
        .into_response())
}

/// `GET /invoices/{id}/messages/{message_id}/letters/{name}`: the PDF
/// letter `name` the message carried, as sent.
pub async fn letter(
    State(app): State<App>,
    Path((id, message_id, name)): Path<(String, String, String)>,
) -> Page {
    let m = archived_of(&app, &id, &message_id).await?;
    let parsed = mail_parser::MessageParser::default().parse(&m.bytes);
    let Some(bytes) = parsed
        .as_ref()
        .and_then(|p| pdfs(p).find(|(n, _)| *n == name).map(|(_, b)| b.to_vec()))
    else {
        return Err(Failure::NotFound(format!(
            "A letter {name:?} in <{message_id}>"
        )));
    };
    let file: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/pdf".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        bytes,
    )
        .into_response())
}
