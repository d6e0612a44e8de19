//! Tier policy rules by name pattern and how a name resolves to a policy.
//!
//! A rule is a name pattern (`*` any run of characters, `?` one character; a plain name
//! matches itself) with a [`TierPolicy`]. Pins ([`crate::Store::pin`]) beat every other
//! rule; among rules of the same kind the longest pattern wins (ties: byte order). A name no
//! rule matches is [`strata_tiering::Policy::Exact`].

use wildmatch::WildMatch;

use crate::engine::is_part_name;
use crate::record::Rule;
use crate::tiers::policy::TierPolicy;

/// Rules compiled for matching.
#[derive(Debug, Default)]
pub(crate) struct RuleSet {
    /// Sorted by priority: pins first, then longer patterns, then byte order.
    rules: Vec<(WildMatch, Rule)>,
}

impl RuleSet {
    pub(crate) fn new(mut rules: Vec<Rule>) -> Self {
        rules.sort_by(|a, b| {
            b.pin
                .cmp(&a.pin)
                .then(b.pattern.len().cmp(&a.pattern.len()))
                .then(a.pattern.cmp(&b.pattern))
        });
        RuleSet {
            rules: rules
                .into_iter()
                .map(|r| (WildMatch::new(&r.pattern), r))
                .collect(),
        }
    }

    /// The policy of tensor `name`. A pack part (ADR 0041) is exact whatever the rules: the
    /// tensors packed in it are read exactly.
    pub(crate) fn resolve(&self, name: &str) -> TierPolicy {
        if is_part_name(name) {
            return TierPolicy::exact();
        }
        self.rules
            .iter()
            .find(|(m, _)| m.matches(name))
            .map(|(_, r)| r.policy.clone())
            .unwrap_or_default()
    }

    /// Whether a pin ([`crate::Store::pin`]) matches `name`; a pack part always is.
    pub(crate) fn is_pinned(&self, name: &str) -> bool {
        is_part_name(name) || self.rules.iter().any(|(m, r)| r.pin && m.matches(name))
    }

    /// The rules, by priority.
    pub(crate) fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().map(|(_, r)| r)
    }
}

#[cfg(test)]
mod tests {
    use strata_tiering::{Policy, Tier};

    use super::*;

    fn rule(pattern: &str, pin: bool, policy: TierPolicy) -> Rule {
        Rule {
            pattern: pattern.into(),
            pin,
            policy,
        }
    }

    #[test]
    fn pins_beat_longer_patterns_and_longer_beat_shorter() {
        let set = RuleSet::new(vec![
            rule("kv.*", false, TierPolicy::tiered(Tier::Hot8)),
            rule("kv.layer0.*", false, TierPolicy::tiered(Tier::Warm7)),
            rule("*norm*", true, TierPolicy::exact()),
        ]);
        assert_eq!(
            set.resolve("kv.layer1.k").policy,
            Policy::Tiered { start: Tier::Hot8 }
        );
        assert_eq!(
            set.resolve("kv.layer0.k").policy,
            Policy::Tiered { start: Tier::Warm7 }
        );
        assert_eq!(set.resolve("kv.layer0.norm").policy, Policy::Exact);
        assert_eq!(set.resolve("other").policy, Policy::Exact);
    }
}
