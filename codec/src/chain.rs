//! The delta-base rule (ADR 0006): what a new version's block is encoded against.
//!
//! A block of a new version is a keyframe or an XOR delta against a block of an earlier
//! version, and reading it decodes every segment down to its keyframe, so the rule bounds
//! that chain by `max_chain`. Every store of Strata (strata-store on disk, strata-wasm in
//! memory) asks [`DeltaRule`] for the decision and keeps the chain facts ([`Link`]) of each
//! block it writes; the rule itself holds no state and does no I/O.
//!
//! Deciding is two calls, so that a store looks up a second block only when the rule needs
//! it:
//!
//! 1. [`DeltaRule::root_needed`]: given the predecessor's [`Link`] (the same block of the
//!    version the new one follows), which [`Root`] block the decision also needs, if any.
//! 2. [`DeltaRule::choose`]: the [`Base`], given the predecessor and the root's link (`None`
//!    when none was needed, or when it could not be found: a missing root means a keyframe).
//!
//! A [`Base::Root`] with `anchor` set is a delta against the lineage's keyframe taken because
//! the chain was full: keep it only if [`keep_anchor`] says it is smaller than a keyframe,
//! else write a keyframe (the tensor has drifted far).
//!
//! ```
//! use strata_codec::chain::{Base, DeltaPolicy, DeltaRule, Link, Root, DEFAULT_MAX_CHAIN};
//!
//! let rule = DeltaRule::default();
//! assert_eq!((rule.policy, rule.max_chain), (DeltaPolicy::Chain, DEFAULT_MAX_CHAIN));
//!
//! // A short chain grows: delta against the predecessor.
//! let pred = Link { depth: 3, run: 3, keyframe: false };
//! assert_eq!(rule.root_needed(pred), None);
//! assert_eq!(rule.choose(pred, None), Base::Predecessor { depth: 4, run: 4 });
//!
//! // A full chain anchors on the lineage's keyframe, if it can be found.
//! let pred = Link { depth: 6, run: 9, keyframe: false };
//! assert_eq!(rule.root_needed(pred), Some(Root::Lineage));
//! let root = Link { depth: 1, run: 1, keyframe: true };
//! assert_eq!(rule.choose(pred, Some(root)), Base::Root { depth: 2, run: 10, anchor: true });
//! assert_eq!(rule.choose(pred, None), Base::Keyframe);
//! ```

/// How a new version chooses the base its blocks are XORed against (ADR 0006).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeltaPolicy {
    /// Delta against the previous version. When the chain of segments to decode would
    /// exceed `max_chain`, a delta against the lineage's keyframe (depth 2) instead, from
    /// which the chain continues; a new keyframe only when that delta is no smaller than
    /// the keyframe ([`keep_anchor`]). Best ratio when versions drift slowly.
    #[default]
    Chain,
    /// Delta against the block's last keyframe (reads decode at most two segments); a new
    /// keyframe after `max_chain` versions.
    Star,
}

/// The default bound on segments decoded to read one block: the deepest that keeps a cold
/// read of a 4 MiB tensor under 10 ms (ADR 0006).
pub const DEFAULT_MAX_CHAIN: u8 = 6;

/// The chain facts of a stored block that the rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// Segments decoded to read the block: 1 for a keyframe.
    pub depth: u8,
    /// Versions of the block's lineage up to it, its keyframe counting 1 (saturating).
    pub run: u8,
    /// The block has no base: it is a keyframe.
    pub keyframe: bool,
}

impl Link {
    /// The link of a new keyframe: depth 1, run 1.
    pub const KEYFRAME: Link = Link {
        depth: 1,
        run: 1,
        keyframe: true,
    };

    /// The link of a new delta of `depth` and `run`.
    pub const fn delta(depth: u8, run: u8) -> Link {
        Link {
            depth,
            run,
            keyframe: false,
        }
    }
}

/// A block other than the predecessor that [`DeltaRule::choose`] needs to know of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Root {
    /// The keyframe the predecessor's chain starts from: follow the bases from the
    /// predecessor's block until a block has none ([`DeltaPolicy::Chain`], chain full).
    Lineage,
    /// The block the predecessor's base names ([`DeltaPolicy::Star`]; in a lineage written
    /// under Star throughout, its keyframe).
    Base,
}

/// What a new block is encoded against, and the chain facts it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// An XOR delta against the predecessor's block.
    Predecessor {
        /// The new block's depth.
        depth: u8,
        /// The new block's run.
        run: u8,
    },
    /// An XOR delta against the [`Root`] block [`DeltaRule::root_needed`] named.
    Root {
        /// The new block's depth.
        depth: u8,
        /// The new block's run.
        run: u8,
        /// Taken because the chain was full ([`DeltaPolicy::Chain`]): keep the delta only
        /// if [`keep_anchor`] holds, else write a keyframe.
        anchor: bool,
    },
    /// A keyframe ([`Link::KEYFRAME`]).
    Keyframe,
}

impl Base {
    /// The new block's link when this base is kept (a keyframe's when it is not a delta).
    pub const fn link(self) -> Link {
        match self {
            Base::Predecessor { depth, run } | Base::Root { depth, run, .. } => {
                Link::delta(depth, run)
            }
            Base::Keyframe => Link::KEYFRAME,
        }
    }
}

/// Whether an anchor delta ([`Base::Root`] with `anchor`) of `delta_len` bytes is worth
/// keeping against the root keyframe's `keyframe_len` bytes (the size a new keyframe would
/// about have): only if strictly smaller.
pub const fn keep_anchor(delta_len: usize, keyframe_len: usize) -> bool {
    delta_len < keyframe_len
}

/// Whether a block whose next delta would be `delta_len` bytes is better written as a new
/// keyframe of about `keyframe_len` bytes, so that the newest version reads without a chain
/// (ADR 0006): only if the keyframe costs at most 3 % more than the deltas it replaces, over
/// the lineage of `max_chain` versions that starts from it (one keyframe and `max_chain - 1`
/// deltas): a keyframe of at most about 1.19 deltas at the default bound. On AdamW's first
/// moments a keyframe is about a delta's size; on fine-tuned weights several times, and their
/// chains go on forward. A looser 1.35 or 1.5 stored dev_pre bf16 2.2 % or 3.7 % larger than
/// forward chains, under ZipNN's ratio (ADR 0006 has the figures).
pub const fn restart_pays(delta_len: usize, keyframe_len: usize, max_chain: u8) -> bool {
    let (d, k) = (delta_len as u128, keyframe_len as u128);
    let others = (max_chain as u128).saturating_sub(1);
    // k - d <= 3 % of (k + others * d), in integers.
    97 * k <= (100 + 3 * others) * d
}

/// The delta-base rule: a policy and its bound. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeltaRule {
    /// How bases are chosen.
    pub policy: DeltaPolicy,
    /// Most segments decoded to read one block, and for [`DeltaPolicy::Star`] the most
    /// versions between keyframes. 1 makes every block a keyframe; 0 as well (stores refuse
    /// it as a setting).
    pub max_chain: u8,
}

impl Default for DeltaRule {
    /// [`DeltaPolicy::Chain`] at [`DEFAULT_MAX_CHAIN`].
    fn default() -> Self {
        DeltaRule::new(DeltaPolicy::Chain, DEFAULT_MAX_CHAIN)
    }
}

impl DeltaRule {
    /// The rule of `policy` bounded by `max_chain`.
    pub const fn new(policy: DeltaPolicy, max_chain: u8) -> Self {
        DeltaRule { policy, max_chain }
    }

    /// Which block besides the predecessor [`DeltaRule::choose`] needs, if any: under
    /// Chain, the lineage's keyframe once the chain is full (and `max_chain` is at least
    /// 2); under Star, the predecessor's base unless the predecessor is a keyframe.
    pub const fn root_needed(&self, pred: Link) -> Option<Root> {
        match self.policy {
            DeltaPolicy::Chain => {
                if pred.depth.saturating_add(1) > self.max_chain && self.max_chain >= 2 {
                    Some(Root::Lineage)
                } else {
                    None
                }
            }
            DeltaPolicy::Star => {
                if pred.keyframe {
                    None
                } else {
                    Some(Root::Base)
                }
            }
        }
    }

    /// The base of a new block whose predecessor's block is `pred`, given the link of the
    /// block [`DeltaRule::root_needed`] named (`None` if it named none, or the block is
    /// missing; `root` is ignored when not needed).
    ///
    /// - **Chain**: a delta against the predecessor while its depth stays within
    ///   `max_chain`; else, if `max_chain` is at least 2 and the lineage's keyframe is
    ///   known, an anchor delta against it at depth 2; else a keyframe.
    /// - **Star**: a delta against the predecessor if it is a keyframe, else against its
    ///   base, while both the run and the depth stay within `max_chain`; else a keyframe.
    ///
    /// The run goes on through anchors and Star deltas: it counts the lineage's versions.
    pub const fn choose(&self, pred: Link, root: Option<Link>) -> Base {
        let run = pred.run.saturating_add(1);
        match self.policy {
            DeltaPolicy::Chain => {
                let depth = pred.depth.saturating_add(1);
                if depth <= self.max_chain {
                    Base::Predecessor { depth, run }
                } else if self.max_chain >= 2 && root.is_some() {
                    // The root is a keyframe (depth 1): the anchor delta has depth 2.
                    Base::Root {
                        depth: 2,
                        run,
                        anchor: true,
                    }
                } else {
                    Base::Keyframe
                }
            }
            DeltaPolicy::Star => {
                let (depth, against_pred) = if pred.keyframe {
                    (pred.depth.saturating_add(1), true)
                } else {
                    match root {
                        Some(r) => (r.depth.saturating_add(1), false),
                        // The base is missing: start a new keyframe.
                        None => return Base::Keyframe,
                    }
                };
                if run > self.max_chain || depth > self.max_chain {
                    Base::Keyframe
                } else if against_pred {
                    Base::Predecessor { depth, run }
                } else {
                    Base::Root {
                        depth,
                        run,
                        anchor: false,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: Link = Link::KEYFRAME;

    fn chain(max: u8) -> DeltaRule {
        DeltaRule::new(DeltaPolicy::Chain, max)
    }

    fn star(max: u8) -> DeltaRule {
        DeltaRule::new(DeltaPolicy::Star, max)
    }

    #[test]
    fn defaults() {
        assert_eq!(DEFAULT_MAX_CHAIN, 6);
        assert_eq!(DeltaRule::default(), chain(6));
        assert_eq!(DeltaPolicy::default(), DeltaPolicy::Chain);
    }

    #[test]
    fn chain_grows_while_within_the_bound() {
        let r = chain(6);
        assert_eq!(r.root_needed(KEY), None);
        assert_eq!(r.choose(KEY, None), Base::Predecessor { depth: 2, run: 2 });
        let p = Link::delta(5, 5);
        assert_eq!(r.root_needed(p), None);
        assert_eq!(r.choose(p, None), Base::Predecessor { depth: 6, run: 6 });
        // A root given when none is needed changes nothing.
        assert_eq!(
            r.choose(p, Some(KEY)),
            Base::Predecessor { depth: 6, run: 6 }
        );
    }

    #[test]
    fn a_full_chain_anchors_on_the_lineage_keyframe() {
        let r = chain(6);
        let p = Link::delta(6, 6);
        assert_eq!(r.root_needed(p), Some(Root::Lineage));
        let anchor = Base::Root {
            depth: 2,
            run: 7,
            anchor: true,
        };
        assert_eq!(r.choose(p, Some(KEY)), anchor);
        assert_eq!(anchor.link(), Link::delta(2, 7));
        // The chain goes on from the anchor.
        assert_eq!(
            r.choose(anchor.link(), None),
            Base::Predecessor { depth: 3, run: 8 }
        );
        // No lineage keyframe found: a keyframe.
        assert_eq!(r.choose(p, None), Base::Keyframe);
        // Deeper than the bound (the bound was lowered since): anchors too.
        assert_eq!(r.root_needed(Link::delta(9, 9)), Some(Root::Lineage));
        assert_eq!(
            r.choose(Link::delta(9, 9), Some(KEY)),
            Base::Root {
                depth: 2,
                run: 10,
                anchor: true
            }
        );
    }

    #[test]
    fn chain_bounds_of_one_and_two() {
        // 1: every block a keyframe, no anchor (depth 2 is over the bound).
        let one = chain(1);
        assert_eq!(one.root_needed(KEY), None);
        assert_eq!(one.choose(KEY, Some(KEY)), Base::Keyframe);
        // 0 behaves as 1.
        assert_eq!(chain(0).choose(KEY, Some(KEY)), Base::Keyframe);
        // 2: a delta on a keyframe, then anchors on it.
        let two = chain(2);
        assert_eq!(
            two.choose(KEY, None),
            Base::Predecessor { depth: 2, run: 2 }
        );
        let p = Link::delta(2, 2);
        assert_eq!(two.root_needed(p), Some(Root::Lineage));
        assert_eq!(
            two.choose(p, Some(KEY)),
            Base::Root {
                depth: 2,
                run: 3,
                anchor: true
            }
        );
    }

    #[test]
    fn saturation() {
        let r = chain(u8::MAX);
        let p = Link::delta(u8::MAX, u8::MAX);
        assert_eq!(r.root_needed(p), None);
        assert_eq!(
            r.choose(p, None),
            Base::Predecessor {
                depth: u8::MAX,
                run: u8::MAX
            }
        );
    }

    #[test]
    fn star_deltas_on_the_keyframe() {
        let r = star(4);
        // On a keyframe predecessor: against it, no root needed.
        assert_eq!(r.root_needed(KEY), None);
        assert_eq!(r.choose(KEY, None), Base::Predecessor { depth: 2, run: 2 });
        // On a delta: against its base.
        let p = Link::delta(2, 3);
        assert_eq!(r.root_needed(p), Some(Root::Base));
        assert_eq!(
            r.choose(p, Some(KEY)),
            Base::Root {
                depth: 2,
                run: 4,
                anchor: false
            }
        );
        // The run over the bound: a keyframe.
        assert_eq!(r.choose(Link::delta(2, 4), Some(KEY)), Base::Keyframe);
        // The base missing: a keyframe.
        assert_eq!(r.choose(p, None), Base::Keyframe);
        // A base deeper than a keyframe (written under Chain): its depth counts.
        let deep = Link::delta(4, 4);
        assert_eq!(r.choose(p, Some(deep)), Base::Keyframe);
        assert_eq!(
            r.choose(p, Some(Link::delta(3, 3))),
            Base::Root {
                depth: 4,
                run: 4,
                anchor: false
            }
        );
        // A keyframe predecessor over the bound (bound 1): a keyframe.
        assert_eq!(star(1).choose(KEY, None), Base::Keyframe);
        // A keyframe predecessor with a run at the bound: a keyframe.
        assert_eq!(r.choose(Link { run: 4, ..KEY }, None), Base::Keyframe);
    }

    #[test]
    fn a_restart_pays_only_within_three_percent_of_a_lineage() {
        // Six versions: 97 k <= 115 d, a keyframe at most 1.186 deltas.
        assert!(restart_pays(1000, 1000, 6));
        assert!(restart_pays(1000, 1185, 6));
        assert!(!restart_pays(1000, 1187, 6));
        assert!(!restart_pays(200, 1000, 6));
        // A bound of 1 or 0: no deltas follow, the keyframe must cost no more than 3 %.
        assert!(restart_pays(1000, 1030, 1));
        assert!(!restart_pays(1000, 1040, 1));
        assert!(restart_pays(usize::MAX, usize::MAX, u8::MAX));
    }

    #[test]
    fn anchors_are_kept_only_when_smaller() {
        assert!(keep_anchor(99, 100));
        assert!(!keep_anchor(100, 100));
        assert!(!keep_anchor(101, 100));
    }
}
