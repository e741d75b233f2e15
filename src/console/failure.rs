//! A handler's failure as a value that renders itself: handlers return
//! `Result<Response, Failure>` and use `?`; the failure becomes its status
//! and a page (`message.html`) saying what happened, rendered once by
//! [`super::pages::finish`], where the templates and the signed-in user
//! are. A failed step is logged here, once, with its cause; its page names
//! what failed, never the cause (which may hold a connection string).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Why a handler answers with a message page instead of its own.
#[derive(Debug)]
pub enum Failure {
    /// A step failed (a statement, the clock, the templates): 500.
    Failed {
        doing: &'static str,
        cause: anyhow::Error,
    },
    /// The invoice or customer is not known: 404.
    NotFound(String),
    /// Nothing was done, for `lines`: a 4xx the person can act on.
    Refused {
        status: StatusCode,
        lines: Vec<String>,
        back: Option<&'static str>,
    },
}

/// `e` as the failure of `doing` ("read the session"): for `map_err`.
pub fn failed<E: Into<anyhow::Error>>(doing: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure::Failed {
        doing,
        cause: e.into(),
    }
}

/// A refusal with one line.
pub fn refused(status: StatusCode, why: impl Into<String>) -> Failure {
    Failure::Refused {
        status,
        lines: vec![why.into()],
        back: None,
    }
}

/// The message page a response asks [`super::pages::finish`] to render.
#[derive(Debug, Clone)]
pub struct MessagePage {
    pub title: &'static str,
    pub lines: Vec<String>,
    pub back: Option<&'static str>,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, page) = match self {
            Self::Failed { doing, cause } => {
                tracing::error!(error = %crate::causes::of_anyhow(&cause), "the console failed to {doing}");
                let page = MessagePage {
                    title: "Error",
                    lines: vec![format!("Failed to {doing}; the console's log says why.")],
                    back: None,
                };
                (StatusCode::INTERNAL_SERVER_ERROR, page)
            }
            Self::NotFound(what) => {
                let page = MessagePage {
                    title: "Not found",
                    lines: vec![format!(
                        "{what} is not in the billing source and has no reminders."
                    )],
                    back: None,
                };
                (StatusCode::NOT_FOUND, page)
            }
            Self::Refused {
                status,
                lines,
                back,
            } => {
                let page = MessagePage {
                    title: "Not done",
                    lines,
                    back,
                };
                (status, page)
            }
        };
        let mut response = status.into_response();
        response.extensions_mut().insert(page);
        response
    }
}

/// What a page handler answers.
pub type Page = Result<Response, Failure>;
