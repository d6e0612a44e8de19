//! Access scores: an exponential moving average of the read rate with recency decay, and
//! a window over the last [`WINDOW`] reads. Scores are in reads per hour.

use crate::clock::{Tick, HOUR, SECOND};
use crate::error::TierError;

/// Number of recent reads whose times are kept per block (the LRU-K window).
pub const WINDOW: usize = 8;

/// How reads turn into a score.
///
/// ```
/// use strata_tiering::{ScoreConfig, HOUR, SECOND};
/// let c = ScoreConfig::default();
/// assert_eq!(c.half_life, HOUR);
/// assert_eq!(c.correlation, SECOND);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreConfig {
    /// Half-life of the moving average (ticks, > 0). Default 1 hour.
    pub half_life: Tick,
    /// Reads closer than this to the previous counted read of the same block count once
    /// (correlated references: one request touching a block several times). Default 1 s.
    pub correlation: Tick,
}

impl Default for ScoreConfig {
    fn default() -> Self {
        Self {
            half_life: HOUR,
            correlation: SECOND,
        }
    }
}

/// Per-block read statistics: 56 bytes, updated in place (no allocation).
///
/// The score at time `now` is the larger of two read-rate estimates, in reads per hour,
/// and 0 until the block has two counted reads (one read is no evidence of a rate, and a
/// scan that reads every block once must not warm them all up):
///
/// - **Moving average.** A decayed read count `c = Σ 2^(-(now - t_i) / half_life)` over the
///   counted reads `t_i`, updated at each read as `c = c * 2^(-dt / half_life) + 1` and
///   decayed to `now` when scored (recency decay). It is divided by the decayed length of
///   the observation, `T = half_life / ln 2 * (1 - 2^(-age / half_life))`, `age` being the
///   time since the statistics started (block registration): at a steady rate `r`,
///   `E[c] = r * T` at every age, so `c / T` is unbiased from the first minutes on (a plain
///   `c * ln 2 / half_life` would read 29 % low an hour after a restart) and tends to
///   `c * ln 2 / half_life` once `age` is many half-lives.
/// - **Window.** Once [`WINDOW`] reads are recorded,
///   `(WINDOW - 1 - sqrt(WINDOW - 1)) / (now - oldest)`, `oldest` being the earliest of the
///   last `WINDOW` reads (kept in whole seconds): a one-sigma lower bound of the rate over
///   the last `WINDOW` reads (the estimate `(WINDOW - 1) / span` has a relative spread of
///   `1 / sqrt(WINDOW - 1)`, 38 %). It follows a burst within a few reads, where the
///   average needs a half-life, decays as `1 / age` once reads stop, and its lower bound
///   keeps Poisson noise of a block read at half the promotion threshold from reaching it.
///
/// ```
/// use strata_tiering::{AccessStats, ScoreConfig, HOUR, MINUTE};
/// let cfg = ScoreConfig::default();
/// let mut s = AccessStats::new(0);
/// s.record(MINUTE, &cfg);
/// assert_eq!(s.score(2 * MINUTE, &cfg), 0.0); // one read: no rate yet
/// for i in 2..=600 {
///     s.record(i * MINUTE, &cfg); // one read a minute for 10 hours
/// }
/// let score = s.score(600 * MINUTE, &cfg);
/// assert!((score - 60.0).abs() < 1.0, "{score}");
/// // An hour without reads halves it.
/// assert!((s.score(660 * MINUTE, &cfg) - score / 2.0).abs() < 1.0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AccessStats {
    /// Decayed read count as of `last`.
    ema: f64,
    /// Time of the last counted read.
    last: Tick,
    /// Start of the observation (whole seconds, saturating).
    since: u32,
    /// The counted reads before `last`, up to `WINDOW - 1` of them, in whole seconds
    /// (saturating); `head` is the next slot to write, the oldest entry once full.
    ring: [u32; WINDOW - 1],
    /// Counted reads since the start (saturating).
    reads: u32,
    /// Reads held: `last` and `kept - 1` ring entries (0..=WINDOW).
    kept: u8,
    head: u8,
}

/// Encoded size of [`AccessStats`] ([`AccessStats::to_bytes`]).
pub const STATS_BYTES: usize = 8 + 8 + 4 + 4 * (WINDOW - 1) + 4 + 1 + 1;

fn secs(t: Tick) -> u32 {
    u32::try_from(t / SECOND).unwrap_or(u32::MAX)
}

impl AccessStats {
    /// Empty statistics observing from `since` (the block's registration).
    pub fn new(since: Tick) -> Self {
        Self {
            since: secs(since),
            ..Self::default()
        }
    }

    /// Records a read at `now`. Returns `false` when the read falls within the correlation
    /// period of the previous counted read and is merged into it. A `now` earlier than the
    /// last read (a clock that stepped back) counts as the same instant.
    #[inline]
    pub fn record(&mut self, now: Tick, cfg: &ScoreConfig) -> bool {
        if self.kept > 0 {
            let dt = now.saturating_sub(self.last);
            if dt < cfg.correlation {
                return false;
            }
            self.ema = self.ema * decay(dt, cfg.half_life) + 1.0;
            self.ring[self.head as usize] = secs(self.last);
            self.head = ((self.head as usize + 1) % (WINDOW - 1)) as u8;
        } else {
            self.ema = 1.0;
        }
        self.last = now.max(self.last);
        if (self.kept as usize) < WINDOW {
            self.kept += 1;
        }
        self.reads = self.reads.saturating_add(1);
        true
    }

    /// The score at `now`, in reads per hour (0 before two counted reads).
    pub fn score(&self, now: Tick, cfg: &ScoreConfig) -> f64 {
        if self.kept < 2 {
            return 0.0;
        }
        let hl = cfg.half_life.max(1) as f64;
        let c = self.ema * decay(now.saturating_sub(self.last), cfg.half_life);
        let floor = cfg.correlation.max(SECOND);
        let age = now
            .saturating_sub(Tick::from(self.since) * SECOND)
            .max(floor) as f64;
        // half_life / ln 2 * (1 - 2^(-age / half_life)). `age` is at least a second, so
        // the subtraction loses at most 1e-12 relative for half-lives up to a year.
        let x = age / hl;
        let observed = if x > 52.0 {
            hl / std::f64::consts::LN_2
        } else {
            (1.0 - (-x).exp2()) * hl / std::f64::consts::LN_2
        };
        let ema_rate = c * HOUR as f64 / observed;
        if (self.kept as usize) < WINDOW {
            return ema_rate;
        }
        let oldest = Tick::from(self.ring[self.head as usize]) * SECOND;
        let span = now.saturating_sub(oldest).max(floor) as f64;
        let n = (WINDOW - 1) as f64;
        let window_rate = (n - n.sqrt()) * HOUR as f64 / span;
        ema_rate.max(window_rate)
    }

    /// Time of the last counted read, or `None` if the block was never read.
    pub fn last_read(&self) -> Option<Tick> {
        (self.kept > 0).then_some(self.last)
    }

    /// Counted reads since the start (saturating at `u32::MAX`).
    pub fn reads(&self) -> u32 {
        self.reads
    }

    /// A fixed little-endian encoding, for a store that keeps scores across restarts.
    ///
    /// ```
    /// use strata_tiering::{AccessStats, ScoreConfig, MINUTE};
    /// let cfg = ScoreConfig::default();
    /// let mut s = AccessStats::new(0);
    /// for i in 1..20 {
    ///     s.record(i * MINUTE, &cfg);
    /// }
    /// let back = AccessStats::from_bytes(&s.to_bytes())?;
    /// assert_eq!(back, s);
    /// # Ok::<(), strata_tiering::TierError>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; STATS_BYTES] {
        let mut out = [0u8; STATS_BYTES];
        out[0..8].copy_from_slice(&self.ema.to_le_bytes());
        out[8..16].copy_from_slice(&self.last.to_le_bytes());
        out[16..20].copy_from_slice(&self.since.to_le_bytes());
        for (i, t) in self.ring.iter().enumerate() {
            out[20 + 4 * i..24 + 4 * i].copy_from_slice(&t.to_le_bytes());
        }
        let o = 20 + 4 * (WINDOW - 1);
        out[o..o + 4].copy_from_slice(&self.reads.to_le_bytes());
        out[o + 4] = self.kept;
        out[o + 5] = self.head;
        out
    }

    /// Decodes [`AccessStats::to_bytes`].
    ///
    /// # Errors
    /// [`TierError::InvalidStats`] if the fields are inconsistent (negative or non-finite
    /// count, window position out of range).
    pub fn from_bytes(bytes: &[u8; STATS_BYTES]) -> Result<Self, TierError> {
        let u32_at =
            |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let mut w8 = [0u8; 8];
        w8.copy_from_slice(&bytes[0..8]);
        let ema = f64::from_le_bytes(w8);
        w8.copy_from_slice(&bytes[8..16]);
        let last = u64::from_le_bytes(w8);
        let mut ring = [0u32; WINDOW - 1];
        for (i, t) in ring.iter_mut().enumerate() {
            *t = u32_at(20 + 4 * i);
        }
        let o = 20 + 4 * (WINDOW - 1);
        let s = Self {
            ema,
            last,
            since: u32_at(16),
            ring,
            reads: u32_at(o),
            kept: bytes[o + 4],
            head: bytes[o + 5],
        };
        let bad = |reason| Err(TierError::InvalidStats { reason });
        if !(s.ema.is_finite() && s.ema >= 0.0) {
            return bad("decayed count is negative or not finite");
        }
        if s.kept as usize > WINDOW || s.head as usize >= WINDOW - 1 {
            return bad("window position out of range");
        }
        if (s.kept == 0) != (s.reads == 0) || u32::from(s.kept) > s.reads {
            return bad("read count and window disagree");
        }
        Ok(s)
    }
}

/// `2^(-dt / half_life)`.
#[inline]
fn decay(dt: Tick, half_life: Tick) -> f64 {
    if dt == 0 {
        1.0
    } else {
        (-(dt as f64) / half_life.max(1) as f64).exp2()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MINUTE;

    #[test]
    fn unbiased_while_young() {
        let cfg = ScoreConfig::default();
        // One read a minute from registration on: about 60 per hour at every age.
        for minutes in [10u64, 30, 60, 120, 600] {
            let mut s = AccessStats::new(0);
            for i in 0..minutes {
                s.record(i * MINUTE + 30 * SECOND, &cfg);
            }
            let score = s.score(minutes * MINUTE, &cfg);
            assert!((score - 60.0).abs() < 4.0, "{minutes} min: {score}");
        }
    }

    #[test]
    fn window_follows_a_burst_with_a_lower_bound() {
        let cfg = ScoreConfig::default();
        let mut s = AccessStats::new(0);
        // Two reads long ago, then a burst of 8 reads 10 s apart, 10 hours later.
        s.record(0, &cfg);
        s.record(MINUTE, &cfg);
        let t0 = 10 * HOUR;
        for i in 0..8 {
            s.record(t0 + i * 10 * SECOND, &cfg);
        }
        let now = t0 + 70 * SECOND;
        let expect = (7.0 - 7f64.sqrt()) * 3600.0 / 70.0;
        assert!((s.score(now, &cfg) - expect).abs() < 1e-9);
        // It decays as 1 / age; after a day the average is gone too.
        assert!(s.score(now + 24 * HOUR, &cfg) < 1.0);
    }

    #[test]
    fn correlated_reads_merge_and_single_reads_score_zero() {
        let cfg = ScoreConfig::default();
        let mut s = AccessStats::new(0);
        assert!(s.record(1_000, &cfg));
        assert!(!s.record(1_500, &cfg));
        assert_eq!(s.reads(), 1);
        assert_eq!(s.score(1_000, &cfg), 0.0);
        assert!(s.record(2_000, &cfg));
        assert!(s.score(2_000, &cfg) > 0.0);
        assert_eq!(AccessStats::default().score(5, &cfg), 0.0);
        assert_eq!(AccessStats::default().last_read(), None);
        assert_eq!(s.last_read(), Some(2_000));
    }

    #[test]
    fn clock_stepping_back_is_tolerated() {
        let cfg = ScoreConfig::default();
        let mut s = AccessStats::new(0);
        s.record(10 * SECOND, &cfg);
        assert!(!s.record(SECOND, &cfg));
        assert_eq!(s.last_read(), Some(10 * SECOND));
        s.record(20 * SECOND, &cfg);
        assert!(s.score(0, &cfg).is_finite());
    }

    #[test]
    fn encoding_round_trips_and_rejects_nonsense() {
        let cfg = ScoreConfig::default();
        let mut s = AccessStats::new(5 * SECOND);
        for i in 0..11 {
            s.record(HOUR + i * MINUTE, &cfg);
        }
        let b = s.to_bytes();
        assert_eq!(AccessStats::from_bytes(&b).unwrap(), s);
        let mut bad = b;
        bad[0..8].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(AccessStats::from_bytes(&bad).is_err());
        let mut bad = b;
        bad[STATS_BYTES - 1] = WINDOW as u8;
        assert!(AccessStats::from_bytes(&bad).is_err());
        let mut bad = b;
        bad[STATS_BYTES - 2] = 0;
        assert!(AccessStats::from_bytes(&bad).is_err());
    }

    #[test]
    fn size() {
        assert_eq!(std::mem::size_of::<AccessStats>(), 56);
        assert_eq!(STATS_BYTES, 54);
    }
}
