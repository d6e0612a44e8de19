//! What Strata's tests, examples and benches share, so that each crate's `tests/common`
//! keeps only what is its own (its dtype and store types):
//!
//! - [`series`]: where the real checkpoint series are (committed and shared);
//! - [`noise`]: deterministic pseudo-random numbers, seeds that can be replayed, f32 bytes,
//!   relative errors;
//! - [`child`]: a child process whose printed lines are collected while it runs, to be
//!   killed (SIGKILL) or waited for;
//! - [`moto`]: moto's S3 server for the remote tests, started on 127.0.0.1 and stopped by
//!   its PID (a skip outside CI, a failure under it, when it cannot be installed);
//! - [`machine`]: the machine's name and this process's peak resident memory, for the
//!   figures a benchmark prints;
//! - [`retrying`]: a call repeated while it fails for a passing reason (a killed
//!   process's lock not yet released).
//!
//! It depends on no Strata crate: the codec's and the store's own tests use it, and a
//! dependency back on them would build a second copy of the crate under test.

#![allow(clippy::panic)]

pub mod child;
pub mod machine;
pub mod moto;
pub mod noise;
pub mod series;

use std::time::{Duration, Instant};

/// Calls `f` until it succeeds, fails with an error `busy` does not accept, or `limit` has
/// passed since the first call (then the last error is returned); waits 20 ms between
/// calls.
///
/// # Errors
/// The last error of `f`.
pub fn retrying<T, E>(
    limit: Duration,
    mut f: impl FnMut() -> Result<T, E>,
    busy: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let start = Instant::now();
    loop {
        match f() {
            Err(e) if busy(&e) && start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrying_stops_on_success_on_other_errors_and_at_the_limit() {
        let mut calls = 0;
        let r: Result<u32, &str> = retrying(
            Duration::from_secs(5),
            || {
                calls += 1;
                if calls < 3 {
                    Err("busy")
                } else {
                    Ok(calls)
                }
            },
            |e| *e == "busy",
        );
        assert_eq!(r, Ok(3));
        let r: Result<(), &str> =
            retrying(Duration::from_secs(5), || Err("broken"), |e| *e == "busy");
        assert_eq!(r, Err("broken"));
        let start = Instant::now();
        let r: Result<(), &str> = retrying(Duration::from_millis(100), || Err("busy"), |_| true);
        assert_eq!(r, Err("busy"));
        assert!(start.elapsed() >= Duration::from_millis(100));
    }
}
