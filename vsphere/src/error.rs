//! The vSphere edge's one error type, classified for the controller (transient or not, and a
//! stable reason string).

use vim_rs::types::structs::MethodFault;

use crate::tls::{TlsObserver, TlsRejection};

/// Everything that can go wrong talking to vCenter or ESXi.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint did not answer: connection refused, timeout, DNS. Worth retrying.
    #[error("vSphere endpoint {url} is unreachable: {detail}")]
    Unreachable { url: String, detail: String },

    /// The server's certificate is not the pinned one. Permanent until the spec changes.
    #[error(
        "TLS thumbprint mismatch: expected {expected}, the server presented {actual}; \
         check the endpoint or update spec.source.thumbprint"
    )]
    ThumbprintMismatch { expected: String, actual: String },

    /// No thumbprint and not insecure, and the platform trust store does not accept the
    /// certificate (typically a self-signed ESXi or vCenter).
    #[error(
        "the TLS certificate of {url} is not trusted ({detail}); pin it with thumbprint {sha256} \
         or set insecureSkipTLSVerify"
    )]
    TlsUntrusted {
        url: String,
        detail: String,
        sha256: String,
    },

    /// The user name or password was refused (InvalidLogin).
    #[error("vSphere login refused for user {user:?}: wrong user name or password")]
    BadCredentials { user: String },

    /// A managed object or a datastore file does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// More than one VM has the requested name.
    #[error("{count} VMs are named {name:?}; select the VM by id or uuid instead")]
    Ambiguous { name: String, count: usize },

    /// Any other fault returned by the server, by its vSphere type name.
    #[error("vSphere fault {name}{}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Fault { name: String, message: String },

    /// The endpoint or a datastore path cannot be used as given.
    #[error("invalid input: {0}")]
    Invalid(String),

    /// An HTTP request (datastore download) answered with an error status.
    #[error("HTTP {status} from {url}")]
    Http { status: u16, url: String },

    /// The server's answer could not be understood.
    #[error("unexpected answer from vSphere: {0}")]
    Protocol(String),

    /// An answer about a VM that vim_rs refuses even without the parts that fail on their own:
    /// asking again gets the same answer.
    #[error("ferry cannot read vSphere's answer about {0}")]
    Unreadable(String),

    /// A local file could not be written.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Faults that say "try again later" rather than "this cannot work".
const TRANSIENT_FAULTS: &[&str] = &[
    "TaskInProgress",
    "HostCommunication",
    "HostNotConnected",
    "HostNotReachable",
    "NotAuthenticated",
    "RequestCanceled",
    "Timedout",
    "SystemError",
];

impl Error {
    /// Whether retrying the same call later may succeed without any change to the spec.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } | Error::Protocol(_) | Error::Io { .. } => true,
            Error::Http { status, .. } => *status >= 500 || *status == 429 || *status == 408,
            Error::Fault { name, .. } => TRANSIENT_FAULTS.contains(&name.as_str()),
            Error::ThumbprintMismatch { .. }
            | Error::TlsUntrusted { .. }
            | Error::BadCredentials { .. }
            | Error::NotFound(_)
            | Error::Ambiguous { .. }
            | Error::Invalid(_)
            | Error::Unreadable(_) => false,
        }
    }

    /// A short, stable label (metrics, condition reasons, exit messages).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Unreachable { .. } => "Unreachable",
            Error::ThumbprintMismatch { .. } => "ThumbprintMismatch",
            Error::TlsUntrusted { .. } => "TlsUntrusted",
            Error::BadCredentials { .. } => "BadCredentials",
            Error::NotFound(_) => "NotFound",
            Error::Ambiguous { .. } => "Ambiguous",
            Error::Fault { .. } => "Fault",
            Error::Invalid(_) => "Invalid",
            Error::Http { .. } => "Http",
            Error::Protocol(_) => "Protocol",
            Error::Unreadable(_) => "Unreadable",
            Error::Io { .. } => "Io",
        }
    }

    /// Classifies a failed HTTP exchange, consulting the TLS observer of the client that made it.
    pub(crate) fn from_reqwest(url: &str, err: &reqwest::Error, tls: &TlsObserver) -> Self {
        if let Some(rejection) = tls.take() {
            return Self::from_rejection(url, rejection);
        }
        if let Some(status) = err.status() {
            return Error::Http {
                status: status.as_u16(),
                url: url.to_owned(),
            };
        }
        if err.is_connect() || err.is_timeout() {
            return Error::Unreachable {
                url: url.to_owned(),
                detail: chain(err),
            };
        }
        if err.is_builder() {
            return Error::Invalid(chain(err));
        }
        // Bodies cut off mid-stream, resets: the network, not the request.
        Error::Unreachable {
            url: url.to_owned(),
            detail: chain(err),
        }
    }

    fn from_rejection(url: &str, r: TlsRejection) -> Self {
        match r {
            TlsRejection::ThumbprintMismatch { expected, actual } => {
                Error::ThumbprintMismatch { expected, actual }
            }
            TlsRejection::Untrusted { detail, sha256 } => Error::TlsUntrusted {
                url: url.to_owned(),
                detail,
                sha256,
            },
        }
    }

    /// Classifies an error of a vim_rs SOAP call.
    pub(crate) fn from_vim(
        url: &str,
        err: &vim_rs::core::client::Error,
        tls: &TlsObserver,
    ) -> Self {
        use vim_rs::core::client::Error as V;
        match err {
            V::MethodFault(f) => Self::from_fault(f),
            V::ReqwestError(e) => Self::from_reqwest(url, e, tls),
            V::ParseError(s) => {
                // vim_rs reports SOAP faults without a typed detail as parse errors carrying the
                // faultstring; vcsim words a refused login this way.
                if s.contains("InvalidLogin") || s.to_ascii_lowercase().contains("login failure") {
                    Error::BadCredentials {
                        user: String::new(),
                    }
                } else {
                    Error::Protocol(s.clone())
                }
            }
            V::MissingOrInvalidSessionKey => Error::Fault {
                name: "NotAuthenticated".into(),
                message: err.to_string(),
            },
            other => Error::Protocol(other.to_string()),
        }
    }

    pub(crate) fn from_fault(f: &MethodFault) -> Self {
        let name = fault_name(f);
        let message = f
            .fault_message
            .iter()
            .flatten()
            .filter_map(|m| {
                m.message
                    .clone()
                    .or_else(|| Some(m.key.clone()))
                    .filter(|s| !s.is_empty())
            })
            .collect::<Vec<_>>()
            .join("; ");
        match name.as_str() {
            "InvalidLogin" | "InvalidLoginFault" => Error::BadCredentials {
                user: String::new(),
            },
            "ManagedObjectNotFound" | "FileNotFound" => {
                Error::NotFound(if message.is_empty() { name } else { message })
            }
            _ => Error::Fault { name, message },
        }
    }

    /// Adds the user name to a [`Error::BadCredentials`] built without it.
    pub(crate) fn for_user(self, user: &str) -> Self {
        match self {
            Error::BadCredentials { .. } => Error::BadCredentials {
                user: user.to_owned(),
            },
            other => other,
        }
    }
}

/// The vSphere type name of a fault (`InvalidLogin`, `InvalidPowerState`, ...).
pub(crate) fn fault_name(f: &MethodFault) -> String {
    f.type_
        .map(|t| t.as_str().to_owned())
        .unwrap_or_else(|| "MethodFault".to_owned())
}

/// An error and its sources on one line (reqwest's own message alone hides the cause).
pub use ferry_crds::error_chain as chain;

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(name: &str) -> MethodFault {
        MethodFault {
            fault_cause: None,
            fault_message: None,
            type_: vim_rs::types::struct_enum::StructType::from_str(name),
            extra_fields_: Default::default(),
        }
    }

    #[test]
    fn invalid_login_is_bad_credentials_and_permanent() {
        let e = Error::from_fault(&fault("InvalidLogin")).for_user("root");
        assert!(matches!(&e, Error::BadCredentials { user } if user == "root"));
        assert!(!e.is_transient());
        assert_eq!(e.reason(), "BadCredentials");
    }

    #[test]
    fn missing_object_is_not_found() {
        assert!(matches!(
            Error::from_fault(&fault("ManagedObjectNotFound")),
            Error::NotFound(_)
        ));
    }

    #[test]
    fn other_faults_keep_their_name_and_split_by_transience() {
        let busy = Error::from_fault(&fault("TaskInProgress"));
        assert!(matches!(&busy, Error::Fault { name, .. } if name == "TaskInProgress"));
        assert!(busy.is_transient());
        let denied = Error::from_fault(&fault("NoPermission"));
        assert!(!denied.is_transient());
        assert_eq!(denied.reason(), "Fault");
    }

    #[test]
    fn classification_table() {
        let cases: Vec<(Error, bool, &str)> = vec![
            (
                Error::Unreachable {
                    url: "u".into(),
                    detail: "refused".into(),
                },
                true,
                "Unreachable",
            ),
            (
                Error::ThumbprintMismatch {
                    expected: "A".into(),
                    actual: "B".into(),
                },
                false,
                "ThumbprintMismatch",
            ),
            (
                Error::TlsUntrusted {
                    url: "u".into(),
                    detail: "d".into(),
                    sha256: "s".into(),
                },
                false,
                "TlsUntrusted",
            ),
            (Error::NotFound("vm-1".into()), false, "NotFound"),
            (
                Error::Ambiguous {
                    name: "a".into(),
                    count: 2,
                },
                false,
                "Ambiguous",
            ),
            (
                Error::Http {
                    status: 503,
                    url: "u".into(),
                },
                true,
                "Http",
            ),
            (
                Error::Http {
                    status: 401,
                    url: "u".into(),
                },
                false,
                "Http",
            ),
            (
                Error::Http {
                    status: 404,
                    url: "u".into(),
                },
                false,
                "Http",
            ),
            (Error::Invalid("x".into()), false, "Invalid"),
            (Error::Unreadable("VM vm-1".into()), false, "Unreadable"),
        ];
        for (e, transient, reason) in cases {
            assert_eq!(e.is_transient(), transient, "{e}");
            assert_eq!(e.reason(), reason, "{e}");
        }
    }

    #[test]
    fn thumbprint_mismatch_message_shows_both_digests() {
        let e = Error::ThumbprintMismatch {
            expected: "AA:BB".into(),
            actual: "CC:DD".into(),
        };
        let msg = e.to_string();
        assert!(msg.contains("AA:BB") && msg.contains("CC:DD"), "{msg}");
    }
}
