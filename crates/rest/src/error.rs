//! Errors in the REST spec's `ErrorModel`: `{"error": {"message", "type", "code"}}`, with the
//! status a client acts on (404 missing, 409 conflict — the client retries a commit —, 400 bad
//! input). Bad input is never a 500.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use iceberg::ErrorKind;
use lake::LakeError;

/// An error answered to a REST client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    pub status: StatusCode,
    /// The spec's exception type, e.g. `NoSuchTableException`.
    pub kind: &'static str,
    pub message: String,
}

impl RestError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        RestError {
            status,
            kind,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestException", message)
    }

    pub fn no_namespace(ns: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NoSuchNamespaceException",
            format!("namespace {ns} does not exist"),
        )
    }

    pub fn no_table(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NoSuchTableException",
            format!("table {name} does not exist"),
        )
    }

    pub fn exists(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "AlreadyExistsException", message)
    }

    pub fn commit_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "CommitFailedException", message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_ACCEPTABLE,
            "UnsupportedOperationException",
            message,
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "ForbiddenException", message)
    }

    /// An error of iceberg's builders or requirement checks while applying a client's commit:
    /// a failed requirement is a conflict (409), anything else is the client's input (400).
    pub fn from_commit(e: &iceberg::Error) -> Self {
        match e.kind() {
            ErrorKind::CatalogCommitConflicts => Self::commit_failed(e.message()),
            _ => Self::bad_request(e.message()),
        }
    }
}

impl From<LakeError> for RestError {
    fn from(e: LakeError) -> Self {
        let msg = e.to_string();
        match e {
            LakeError::NoSuchTable { .. } => {
                Self::new(StatusCode::NOT_FOUND, "NoSuchTableException", msg)
            }
            LakeError::NoSuchNamespace(_) => {
                Self::new(StatusCode::NOT_FOUND, "NoSuchNamespaceException", msg)
            }
            LakeError::TableExists(_) => Self::exists(msg),
            LakeError::NamespaceNotEmpty(_) => {
                Self::new(StatusCode::CONFLICT, "NamespaceNotEmptyException", msg)
            }
            LakeError::Conflict { .. }
            | LakeError::TooManyRetries { .. }
            | LakeError::ChangedTwice { .. } => Self::commit_failed(msg),
            LakeError::InvalidName { .. }
            | LakeError::Schema { .. }
            | LakeError::Location { .. } => Self::bad_request(msg),
            LakeError::CommitOutcomeUnknown { .. } => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "CommitStateUnknownException",
                msg,
            ),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "ServerError", msg),
        }
    }
}

impl From<iceberg::Error> for RestError {
    fn from(e: iceberg::Error) -> Self {
        let msg = e.to_string();
        match e.kind() {
            ErrorKind::TableNotFound => {
                Self::new(StatusCode::NOT_FOUND, "NoSuchTableException", msg)
            }
            ErrorKind::NamespaceNotFound => {
                Self::new(StatusCode::NOT_FOUND, "NoSuchNamespaceException", msg)
            }
            ErrorKind::TableAlreadyExists | ErrorKind::NamespaceAlreadyExists => Self::exists(msg),
            ErrorKind::CatalogCommitConflicts => Self::commit_failed(msg),
            ErrorKind::DataInvalid | ErrorKind::PreconditionFailed => Self::bad_request(msg),
            ErrorKind::FeatureUnsupported => Self::unsupported(msg),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "ServerError", msg),
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, kind = self.kind, "{}", self.message);
        }
        let body = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.status.as_u16(),
            }
        });
        (self.status, Json(body)).into_response()
    }
}
