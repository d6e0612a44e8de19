//! Time. The policy never reads a clock: every call that needs the time takes a [`Tick`] the
//! caller supplies. A caller that keeps a clock (a store that records reads as they happen)
//! uses [`Clock`]: the system time, or a [`ManualClock`] that tests and simulations move by
//! hand. The WASM store keeps none: JavaScript passes every time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A point in time in milliseconds, on any epoch the caller picks (wall clock, process
/// start, simulation step). Only differences between ticks matter.
pub type Tick = u64;

/// One second in ticks.
pub const SECOND: Tick = 1_000;
/// One minute in ticks.
pub const MINUTE: Tick = 60 * SECOND;
/// One hour in ticks.
pub const HOUR: Tick = 60 * MINUTE;

/// Where [`Tick`]s come from: the system clock, or a [`ManualClock`]. Cheap to clone,
/// `Send + Sync`; clones of a manual clock share its time. Two clocks are equal when both
/// are the system clock, or both share one manual clock.
///
/// ```
/// use strata_tiering::{Clock, SECOND};
///
/// let (clock, hand) = Clock::manual(0);
/// let copy = clock.clone();
/// hand.advance(3 * SECOND);
/// assert_eq!(copy.now(), 3_000);
/// assert_eq!(copy, clock);
/// assert_ne!(clock, Clock::System);
/// assert!(Clock::System.now() > 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Clock {
    /// Milliseconds since the Unix epoch (0 if the system clock is set before it). On
    /// `wasm32-unknown-unknown`, which has no system clock, always 0: pass times there.
    #[default]
    System,
    /// A clock set by hand, shared with the [`ManualClock`] handles that move it.
    Manual(ManualClock),
}

impl Clock {
    /// A manual clock standing at `start`, and the handle that moves it.
    pub fn manual(start: Tick) -> (Clock, ManualClock) {
        let hand = ManualClock::new(start);
        (Clock::Manual(hand.clone()), hand)
    }

    /// The current time.
    pub fn now(&self) -> Tick {
        match self {
            Clock::System => system_now(),
            Clock::Manual(m) => m.now(),
        }
    }
}

impl From<ManualClock> for Clock {
    fn from(m: ManualClock) -> Self {
        Clock::Manual(m)
    }
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn system_now() -> Tick {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `wasm32-unknown-unknown` has no system clock (`SystemTime::now` panics there).
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn system_now() -> Tick {
    0
}

/// A clock that moves only when told to, for tests and simulations. Clones share one time
/// (an atomic), so a store can read it on any thread while a test moves it.
///
/// ```
/// use strata_tiering::{ManualClock, SECOND};
/// let clock = ManualClock::new(0);
/// clock.advance(3 * SECOND);
/// assert_eq!(clock.now(), 3_000);
/// clock.set(10);
/// assert_eq!(clock.now(), 10);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Tick) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// The time it stands at.
    pub fn now(&self) -> Tick {
        self.now.load(Ordering::Relaxed)
    }

    /// Moves the clock forward by `dt` (saturating at `u64::MAX`) and returns the new time.
    pub fn advance(&self, dt: Tick) -> Tick {
        let mut t = self.now();
        loop {
            let next = t.saturating_add(dt);
            match self
                .now
                .compare_exchange_weak(t, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(actual) => t = actual,
            }
        }
    }

    /// Sets the clock to `t` (which may be earlier: the policy tolerates clocks that step
    /// back).
    pub fn set(&self, t: Tick) {
        self.now.store(t, Ordering::Relaxed);
    }
}

impl PartialEq for ManualClock {
    /// The same clock: handles that share one time.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.now, &other.now)
    }
}

impl Eq for ManualClock {}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync + Clone + std::fmt::Debug + PartialEq>() {}

    #[test]
    fn manual_clocks_share_their_time() {
        send_sync::<Clock>();
        let (clock, hand) = Clock::manual(5);
        assert_eq!(clock.now(), 5);
        assert_eq!(hand.advance(10), 15);
        assert_eq!(clock.now(), 15);
        hand.set(2);
        assert_eq!(clock.clone().now(), 2);
        assert_eq!(hand.advance(u64::MAX), u64::MAX);
        // Equal: the same shared time, not the same reading.
        assert_eq!(clock, Clock::from(hand.clone()));
        assert_ne!(clock, Clock::from(ManualClock::new(u64::MAX)));
        assert_eq!(Clock::default(), Clock::System);
    }

    #[test]
    fn the_system_clock_reads_milliseconds_since_the_epoch() {
        let t = Clock::System.now();
        // After 2020-01-01 and before 2200.
        assert!((1_577_836_800_000..7_258_118_400_000).contains(&t), "{t}");
    }

    #[test]
    fn threads_see_the_time_set() {
        let (clock, hand) = Clock::manual(0);
        std::thread::scope(|s| {
            s.spawn(|| hand.advance(7));
        });
        assert_eq!(clock.now(), 7);
    }
}
