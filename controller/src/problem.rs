//! Something in the world that stops a step, classified once where it is observed: what the
//! ports return and what decisions read.

use ferry_crds::Reason;

/// A problem of the migration (not of the controller): a reason for the conditions, a message
/// for the operator, and whether trying again later may help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The condition reason that tells the operator what is wrong.
    pub reason: Reason,
    /// What happened and what to do about it.
    pub message: String,
    /// Whether trying again later, with nothing else changed, may succeed.
    pub transient: bool,
}

/// A problem's message is what status, Events and logs show: no URL user info reaches them
/// (`ferry_crds::redact`), whichever error text it was made from.
fn redacted(message: String) -> String {
    match ferry_crds::redact::userinfo(&message) {
        std::borrow::Cow::Owned(r) => r,
        std::borrow::Cow::Borrowed(_) => message,
    }
}

impl Problem {
    /// A problem that retrying may fix.
    pub fn transient(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: redacted(message.into()),
            transient: true,
        }
    }

    /// A problem that needs the operator.
    pub fn permanent(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: redacted(message.into()),
            transient: false,
        }
    }
}
