//! Staging errors, classified: what the operator must fix versus what a retry may cure.

/// Everything that can go wrong with the S3 staging area.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The staging configuration cannot work as given (endpoint URL, key).
    #[error("invalid staging configuration: {0}")]
    Invalid(String),

    /// The S3 endpoint did not answer (refused, timeout, DNS). Worth retrying.
    #[error("S3 endpoint {endpoint} is unreachable: {detail}")]
    Unreachable { endpoint: String, detail: String },

    /// The keys were refused or lack permission.
    #[error("S3 refused access ({detail}); check the staging credentials and their permissions")]
    AccessDenied { detail: String },

    /// The bucket does not exist.
    #[error(
        "S3 bucket {bucket:?} does not exist at {endpoint}; create it or fix spec.staging.bucket"
    )]
    NoSuchBucket { bucket: String, endpoint: String },

    /// The object does not exist.
    #[error("staged object {key} not found")]
    NotFound { key: String },

    /// The server failed (5xx) or throttled. Worth retrying.
    #[error("S3 server error: {0}")]
    Server(String),

    /// Anything else S3 said no to.
    #[error("S3 error: {0}")]
    Other(String),

    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl Error {
    /// Whether retrying later may succeed without a change to the spec or the store.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unreachable { .. } | Error::Server(_) | Error::Io { .. }
        )
    }

    /// A short, stable label (metrics, condition reasons, exit messages).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "Invalid",
            Error::Unreachable { .. } => "Unreachable",
            Error::AccessDenied { .. } => "AccessDenied",
            Error::NoSuchBucket { .. } => "NoSuchBucket",
            Error::NotFound { .. } => "NotFound",
            Error::Server(_) => "Server",
            Error::Other(_) => "Other",
            Error::Io { .. } => "Io",
        }
    }
}

/// The variant of object_store's error, which the classification needs besides the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    NotFound,
    Denied,
    /// A connection-level failure was found in the error's sources.
    Network,
    Other,
}

/// Where an error happened, for the message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context<'a> {
    pub endpoint: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
}

/// Classifies a store error from its variant and its full text. S3 names the cause in the XML
/// body (`<Code>NoSuchBucket</Code>`), which object_store keeps only as text.
pub(crate) fn classify(kind: StoreKind, text: &str, cx: Context<'_>) -> Error {
    let has = |s: &str| text.contains(s);
    if has("NoSuchBucket") {
        return Error::NoSuchBucket {
            bucket: cx.bucket.to_owned(),
            endpoint: cx.endpoint.to_owned(),
        };
    }
    if kind == StoreKind::Denied
        || [
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "403 Forbidden",
            "401 Unauthorized",
        ]
        .iter()
        .any(|s| has(s))
    {
        return Error::AccessDenied {
            detail: text.to_owned(),
        };
    }
    match kind {
        StoreKind::NotFound => {
            return Error::NotFound {
                key: cx.key.to_owned(),
            };
        }
        StoreKind::Network => {
            return Error::Unreachable {
                endpoint: cx.endpoint.to_owned(),
                detail: text.to_owned(),
            };
        }
        StoreKind::Denied | StoreKind::Other => {}
    }
    if has("status code: 5") || has("SlowDown") || has("429 Too Many Requests") {
        return Error::Server(text.to_owned());
    }
    Error::Other(text.to_owned())
}

pub(crate) fn from_store(err: &object_store::Error, cx: Context<'_>) -> Error {
    let mut kind = match err {
        object_store::Error::NotFound { .. } => StoreKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => StoreKind::Denied,
        _ => StoreKind::Other,
    };
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(h) = e.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as K;
            if matches!(
                h.kind(),
                K::Connect | K::Timeout | K::Request | K::Interrupted
            ) {
                kind = StoreKind::Network;
            }
        }
        next = e.source();
    }
    // object_store's own message alone hides the cause an operator needs ("Connection refused").
    classify(kind, &ferry_crds::error_chain(err), cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CX: Context<'static> = Context {
        endpoint: "http://127.0.0.1:9000",
        bucket: "ferry",
        key: "a/b",
    };

    #[test]
    fn classification_table() {
        let cases: Vec<(StoreKind, &str, &str, bool)> = vec![
            (
                StoreKind::NotFound,
                "404 Not Found: <Error><Code>NoSuchBucket</Code></Error>",
                "NoSuchBucket",
                false,
            ),
            (
                StoreKind::Other,
                "status code: 404 Not Found: <Code>NoSuchBucket</Code>",
                "NoSuchBucket",
                false,
            ),
            (
                StoreKind::NotFound,
                "Object at location a/b not found",
                "NotFound",
                false,
            ),
            (
                StoreKind::Denied,
                "permission denied",
                "AccessDenied",
                false,
            ),
            (
                StoreKind::Other,
                "status code: 403 Forbidden: <Code>InvalidAccessKeyId</Code>",
                "AccessDenied",
                false,
            ),
            (
                StoreKind::Other,
                "<Code>SignatureDoesNotMatch</Code>",
                "AccessDenied",
                false,
            ),
            (
                StoreKind::Network,
                "error sending request: Connection refused",
                "Unreachable",
                true,
            ),
            (
                StoreKind::Other,
                "Server returned non-2xx status code: 503 Service Unavailable",
                "Server",
                true,
            ),
            (
                StoreKind::Other,
                "Server returned non-2xx status code: 400 Bad Request",
                "Other",
                false,
            ),
        ];
        for (kind, text, reason, transient) in cases {
            let e = classify(kind, text, CX);
            assert_eq!(e.reason(), reason, "{text}");
            assert_eq!(e.is_transient(), transient, "{text}");
        }
    }

    #[test]
    fn missing_bucket_message_names_bucket_and_endpoint() {
        let msg = classify(StoreKind::Other, "NoSuchBucket", CX).to_string();
        assert!(
            msg.contains("\"ferry\"") && msg.contains("127.0.0.1:9000"),
            "{msg}"
        );
    }
}
