//! Number formatting shared by the commands.

use std::time::Duration;

/// Bytes in megabytes (10^6), e.g. `3.92 MB`.
pub(crate) fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// Throughput in MB/s (10^6 bytes per second).
pub(crate) fn mb_s(bytes: u64, t: Duration) -> String {
    format!("{:.1} MB/s", bytes as f64 / 1e6 / t.as_secs_f64().max(1e-9))
}

/// A duration in ms with 2 decimals.
pub(crate) fn ms(t: Duration) -> String {
    format!("{:.2} ms", t.as_secs_f64() * 1e3)
}

/// A shape as `[2, 3]`.
pub(crate) fn shape(s: &[u64]) -> String {
    format!(
        "[{}]",
        s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    )
}
