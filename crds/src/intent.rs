//! The operator's intents as JSON merge patches on `spec`: what the cockpit, the wave controller
//! and anyone with kubectl send to steer a migration or a wave. One place, so that every client
//! speaks the same language and the controller reads one shape.

use serde_json::{Value, json};

use crate::names;

/// `spec.cancel: true`: clean up and end in `Cancelled`.
pub fn cancel() -> Value {
    json!({"spec": {"cancel": true}})
}

/// `spec.paused`: no new step while true.
pub fn pause(paused: bool) -> Value {
    json!({"spec": {"paused": paused}})
}

/// Raises `spec.retry` from `current` to `current + 1`. A cancelled object starts again only
/// with `cancel` back to false, so that is sent too. With `resource_version` the raise is
/// conditional: two operators pressing retry at once raise it once, the second gets a conflict.
pub fn retry(current: i64, cancelled: bool, resource_version: Option<&str>) -> Value {
    let mut spec = json!({"retry": current.saturating_add(1)});
    if cancelled {
        spec["cancel"] = json!(false);
    }
    let mut patch = json!({"spec": spec});
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    patch
}

/// `spec.warm.cutover: true`: a warm migration cuts over — the source powered off, its last
/// changes copied, the VM started.
pub fn cutover() -> Value {
    json!({"spec": {"warm": {"cutover": true}}})
}

/// Sets `spec.retry` to `token` (a wave passes its own token down to its failed children).
pub fn retry_to(token: i64) -> Value {
    json!({"spec": {"retry": token}})
}

/// Removes the wave's hold annotation: the migration may start.
pub fn release() -> Value {
    json!({"metadata": {"annotations": {names::HOLD_ANNOTATION: null}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_raises_by_one_and_uncancels_and_is_conditional_on_the_version_read() {
        assert_eq!(retry(2, false, None), json!({"spec": {"retry": 3}}));
        assert_eq!(
            retry(0, true, Some("42")),
            json!({"spec": {"retry": 1, "cancel": false}, "metadata": {"resourceVersion": "42"}})
        );
        assert_eq!(
            retry(i64::MAX, false, None)["spec"]["retry"],
            json!(i64::MAX)
        );
    }

    #[test]
    fn the_other_intents_touch_one_field_each() {
        assert_eq!(cancel(), json!({"spec": {"cancel": true}}));
        assert_eq!(pause(false), json!({"spec": {"paused": false}}));
        assert_eq!(retry_to(4), json!({"spec": {"retry": 4}}));
        assert_eq!(
            release()["metadata"]["annotations"][names::HOLD_ANNOTATION],
            Value::Null
        );
    }
}
