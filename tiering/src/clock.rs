//! Injected time. The crate never reads a clock: every call that needs the time takes a
//! [`Tick`] the caller supplies, usually from a [`Clock`] of its choice.

use std::cell::Cell;

/// A point in time in milliseconds, on any epoch the caller picks (wall clock, process
/// start, simulation step). Only differences between ticks matter.
pub type Tick = u64;

/// One second in ticks.
pub const SECOND: Tick = 1_000;
/// One minute in ticks.
pub const MINUTE: Tick = 60 * SECOND;
/// One hour in ticks.
pub const HOUR: Tick = 60 * MINUTE;

/// A source of [`Tick`]s. The store implements it over its own time source; tests and
/// simulations use [`ManualClock`]. Any `Fn() -> Tick` closure is a clock too.
///
/// ```
/// use strata_tiering::{Clock, Tick};
/// let fixed = || -> Tick { 42 };
/// assert_eq!(fixed.now(), 42);
/// ```
pub trait Clock {
    /// The current time.
    fn now(&self) -> Tick;
}

impl<F: Fn() -> Tick> Clock for F {
    fn now(&self) -> Tick {
        self()
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// ```
/// use strata_tiering::{Clock, ManualClock, SECOND};
/// let clock = ManualClock::new(0);
/// clock.advance(3 * SECOND);
/// assert_eq!(clock.now(), 3_000);
/// ```
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now: Cell<Tick>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Tick) -> Self {
        Self {
            now: Cell::new(start),
        }
    }

    /// Moves the clock forward by `dt` (saturating at `u64::MAX`) and returns the new time.
    pub fn advance(&self, dt: Tick) -> Tick {
        let t = self.now.get().saturating_add(dt);
        self.now.set(t);
        t
    }

    /// Sets the clock to `t` (which may be earlier: the policy tolerates clocks that step back).
    pub fn set(&self, t: Tick) {
        self.now.set(t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Tick {
        self.now.get()
    }
}
