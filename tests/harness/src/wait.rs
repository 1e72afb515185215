//! Waiting for a condition to hold, with a deadline and a message that says what was awaited.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// Polls `check` until it returns `Some`, or fails after `timeout` naming `what`.
///
/// This is a condition wait, not a sleep: it returns as soon as the condition holds. Prefer a
/// watch (`kube::runtime::wait::await_condition`) where one fits; this serves conditions that
/// span several objects or outside systems.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(50);
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                secs: timeout.as_secs(),
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}
