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
    /// How many tries a transient problem gets before the migration fails with it.
    pub tries: Tries,
}

/// How many tries a transient [`Problem`] gets before the migration fails with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tries {
    /// The policy's `max_transient_retries`, with backoff.
    #[default]
    Policy,
    /// [`FEW_TRIES`]: a refusal only someone's change mends (an admission policy, RBAC, a
    /// validation rule), tried again in case that change comes soon, then failed.
    Few,
    /// Until it passes: a quota, which its namespace's admin may raise.
    Unbounded,
}

/// The tries of a [`Tries::Few`] problem.
pub const FEW_TRIES: u32 = 3;

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
            tries: Tries::Policy,
        }
    }

    /// A problem that needs the operator.
    pub fn permanent(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: redacted(message.into()),
            transient: false,
            tries: Tries::Policy,
        }
    }

    /// The problem, tried `tries` times.
    #[must_use]
    pub fn tried(mut self, tries: Tries) -> Self {
        self.tries = tries;
        self
    }
}

/// The problem of one of ferry's writes that the API server refused, `doing` what (e.g.
/// "create Job m-convert"), with the server's words whole; `None` for an error that is not a
/// refusal (a conflict, a timeout, a fenced write: the controller's own trouble, retried by the
/// work queue). Pure.
///
/// * A ResourceQuota's refusal waits ([`Reason::QuotaExceeded`], [`Tries::Unbounded`]): the
///   quota may be raised, and the migration goes on then by itself.
/// * An admission policy's or webhook's denial ([`Reason::AdmissionDenied`]) and any other
///   refusal — RBAC forbidden, a validation rule, an invalid object ([`Reason::APIRefused`]) —
///   is tried [`FEW_TRIES`] times, then fails the migration (retriable once it is mended).
pub fn refused(doing: &str, e: &kube::Error) -> Option<Problem> {
    let kube::Error::Api(s) = e else {
        return None;
    };
    if !matches!(s.code, 400 | 403 | 422) {
        return None;
    }
    let words = &s.message;
    let (reason, tries, then) = if words.contains("exceeded quota") {
        (
            Reason::QuotaExceeded,
            Tries::Unbounded,
            "; ferry tries again until the quota allows it",
        )
    } else if words.contains("ValidatingAdmissionPolicy")
        || words.contains("admission webhook")
        || words.contains("denied request")
        || words.contains("denied the request")
    {
        (Reason::AdmissionDenied, Tries::Few, "")
    } else {
        (Reason::APIRefused, Tries::Few, "")
    };
    Some(
        Problem::transient(
            reason,
            format!(
                "the API server refused to {doing} ({}): {words}{then}",
                s.code
            ),
        )
        .tried(tries),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn a_refusal_is_named_by_who_refused_and_keeps_the_servers_words() {
        let quota = api(
            403,
            "Forbidden",
            "jobs.batch \"m-convert\" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=0, limited: count/jobs.batch=0",
        );
        let p = refused("create Job m-convert", &quota).unwrap();
        assert_eq!(
            (p.reason, p.tries),
            (Reason::QuotaExceeded, Tries::Unbounded)
        );
        assert!(p.transient);
        assert!(
            p.message.contains("limited: count/jobs.batch=0"),
            "{}",
            p.message
        );
        assert!(p.message.contains("create Job m-convert"), "{}", p.message);

        let policy = api(
            403,
            "Forbidden",
            "jobs.batch \"m-convert\" is forbidden: ValidatingAdmissionPolicy 'ferry-controller-blast-radius' with binding 'ferry-controller-blast-radius' denied request: failed expression: image",
        );
        let p = refused("create Job m-convert", &policy).unwrap();
        assert_eq!((p.reason, p.tries), (Reason::AdmissionDenied, Tries::Few));
        assert!(
            p.message.ends_with("failed expression: image"),
            "{}",
            p.message
        );
        let webhook = api(
            400,
            "BadRequest",
            "admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: spec.template",
        );
        assert_eq!(
            refused("create VirtualMachine m", &webhook).unwrap().reason,
            Reason::AdmissionDenied
        );

        let rbac = api(
            403,
            "Forbidden",
            "jobs.batch is forbidden: User \"system:serviceaccount:ferry-system:ferry\" cannot create resource \"jobs\"",
        );
        let invalid = api(
            422,
            "Invalid",
            "Job.batch \"m\" is invalid: spec.template: Required value",
        );
        for e in [rbac, invalid] {
            let p = refused("create Job m", &e).unwrap();
            assert_eq!((p.reason, p.tries), (Reason::APIRefused, Tries::Few));
        }

        // Not refusals: the controller's own trouble, retried by the work queue.
        for e in [
            api(409, "Conflict", "the object has been modified"),
            api(500, "InternalError", "etcdserver: request timed out"),
            api(404, "NotFound", "not found"),
        ] {
            assert_eq!(refused("create Job m", &e), None);
        }
    }
}
