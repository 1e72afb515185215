//! Ports for the processes a test starts (a controller's metrics, a replica's health).
//!
//! Why not `bind(127.0.0.1:0)` and let go: that port comes from the kernel's ephemeral range
//! (`net.ipv4.ip_local_port_range`, 32768–60999 by default), which every outgoing connection
//! draws from too. Between the test's pick and the process's bind, a client connection of any
//! test on the machine may take it; seen as "Address already in use" in a controller started
//! minutes after its port was picked. Below that range no connection takes a port by itself.

use std::sync::atomic::{AtomicU32, Ordering};

/// The ports handed out: below the kernel's ephemeral range.
const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port on 127.0.0.1 that is free now and outside the ephemeral range. Test processes that
/// run at once start from different points (their pid), and each hands out ports in turn.
///
/// # Panics
/// When no port of the range is free.
pub fn free_port() -> u16 {
    let start = std::process::id().wrapping_mul(2_654_435_761) % COUNT;
    for _ in 0..COUNT {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start + k.wrapping_mul(7)) % COUNT;
        let port = u16::try_from(port).unwrap_or(u16::MAX);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let a = free_port();
        let b = free_port();
        assert_ne!(a, b);
        for p in [a, b] {
            assert!((20_000..32_000).contains(&p), "{p}");
            drop(std::net::TcpListener::bind(("127.0.0.1", p)).expect("free"));
        }
    }
}
