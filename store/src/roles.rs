//! What a tensor of a training checkpoint is for ([`Role`]), from its name: the names the
//! drop-ins (`strata.hf`, `strata.lightning`, `strata.dcp`), PyTorch's optimizers, Hugging
//! Face, Lightning, DCP and DeepSpeed give optimizer state, or a pattern the user sets
//! ([`RoleRule`]). Aging treats each role at the precision resuming from it needs (ADR 0027);
//! the data's own domain ([`strata_codec::domain`]) guards every lossy path whatever the name.

use wildmatch::WildMatch;

use crate::DType;

/// The role of a tensor in a training checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Model parameters, and an optimizer's master copies of them (`fp32_from_fp16_params`,
    /// `master_param`): aged as quantized deltas against the newer version.
    Weight,
    /// An optimizer's first moment (Adam's `exp_avg`, SGD's `momentum_buffer`): a signed,
    /// fast-decaying average; aged against zero or the newer version, whichever is smaller.
    FirstMoment,
    /// An optimizer's second moment (Adam's `exp_avg_sq`, `max_exp_avg_sq`, RMSprop's
    /// `square_avg`, Adagrad's `sum`, Adafactor's factors): non-negative, divided by in the
    /// update; aged in the log-relative mode, never below zero.
    SecondMoment,
    /// A step or iteration counter (`state/N/step`, `global_step`, `num_batches_tracked`):
    /// always exact.
    Counter,
    /// Other training state (scheduler, RNG, hyper-parameters, integer or bool tensors,
    /// scalars): always exact.
    State,
}

impl Role {
    /// The role's name, as the CLI and Python spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Weight => "weight",
            Role::FirstMoment => "first-moment",
            Role::SecondMoment => "second-moment",
            Role::Counter => "counter",
            Role::State => "state",
        }
    }

    /// The role of a name the CLI and Python spell (`weight`, `first-moment`,
    /// `second-moment`, `counter`, `state`; `_` for `-` too).
    pub fn parse(text: &str) -> Option<Role> {
        Some(match text.replace('_', "-").as_str() {
            "weight" | "weights" => Role::Weight,
            "first-moment" | "exp-avg" | "momentum" => Role::FirstMoment,
            "second-moment" | "exp-avg-sq" => Role::SecondMoment,
            "counter" => Role::Counter,
            "state" | "exact" => Role::State,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A role for the tensors whose names match a pattern (`*` any run of characters, `?` one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRule {
    /// The name pattern.
    pub pattern: String,
    /// The role of the tensors it matches.
    pub role: Role,
}

/// The last components of second-moment state, by optimizer.
const SECOND: &[&str] = &[
    "exp_avg_sq",     // Adam, AdamW (torch, HF, DeepSpeed)
    "max_exp_avg_sq", // AMSGrad
    "exp_avg_sq_row", // Adafactor (HF)
    "exp_avg_sq_col",
    "square_avg", // RMSprop, Adadelta
    "acc_delta",  // Adadelta
    "sum",        // Adagrad
    "exp_inf",    // Adamax
    "nu",         // optax
    "second_moment",
    "v_hat",
];

/// The last components of first-moment state.
const FIRST: &[&str] = &[
    "exp_avg",
    "momentum_buffer",
    "mu",
    "first_moment",
    "momentum",
    "exp_avg_row",
];

/// The last components of counters.
const COUNTERS: &[&str] = &[
    "step",
    "steps",
    "global_step",
    "_step_count",
    "num_batches_tracked",
    "epoch",
    "iteration",
    "last_epoch",
    "count",
];

/// Components that mark the rest of the path as non-weight training state.
const STATE: &[&str] = &[
    "rng",
    "rng_state",
    "random",
    "generator",
    "lr_scheduler",
    "scheduler",
    "param_groups",
    "scaler",
    "grad_scaler",
    "loops",
    "callbacks",
];

/// Components under which a tensor is an optimizer's (master copies are weights).
const OPTIMIZER: &[&str] = &[
    "optimizer",
    "optimizer_states",
    "optim",
    "opt_state",
    "optimizer_state",
    "state",
];

/// Components that mark an optimizer's master copy of the weights.
const MASTER: &[&str] = &[
    "fp32_from_fp16_params",
    "fp32_flat_groups",
    "single_partition_of_fp32_groups",
    "master_param",
    "master_params",
    "master_weights",
];

/// The role a tensor's name, dtype and shape give it, unless a rule of `rules` (first match
/// first) says otherwise.
pub fn role_of(rules: &[RoleRule], name: &str, dtype: DType, shape: &[u64]) -> Role {
    if let Some(r) = rules
        .iter()
        .find(|r| WildMatch::new(&r.pattern).matches(name))
    {
        return r.role;
    }
    infer(name, dtype, shape)
}

/// The role from the name alone (no rules): see [`role_of`].
fn infer(name: &str, dtype: DType, shape: &[u64]) -> Role {
    let parts: Vec<String> = name
        .split(['/', '.', ':'])
        .filter(|p| !p.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let last = parts.last().map_or("", String::as_str);
    let has = |set: &[&str]| parts.iter().any(|p| set.contains(&p.as_str()));
    let in_optimizer = has(OPTIMIZER);
    if COUNTERS.contains(&last) {
        return Role::Counter;
    }
    if !dtype.is_float() || shape.iter().product::<u64>() <= 1 {
        return Role::State;
    }
    if has(MASTER) {
        return Role::Weight;
    }
    if has(STATE) {
        return Role::State;
    }
    // Optimizer state: the last component names it (and `sum`, `nu`, `mu`, `momentum` only
    // under an optimizer: they are ordinary words in model names).
    let short = ["sum", "nu", "mu", "momentum"];
    let named = |set: &[&str]| set.contains(&last) && (in_optimizer || !short.contains(&last));
    if named(SECOND) {
        return Role::SecondMoment;
    }
    if named(FIRST) {
        return Role::FirstMoment;
    }
    Role::Weight
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> Role {
        role_of(&[], name, DType::F32, &[64, 64])
    }

    #[test]
    fn names_the_drop_ins_and_trainers_give() {
        // strata.hf (the names benches/trainstate writes), Lightning, DCP, DeepSpeed, torch.
        assert_eq!(
            r("__trainer__/optimizer/state/3/exp_avg_sq"),
            Role::SecondMoment
        );
        assert_eq!(
            r("__trainer__/optimizer/state/3/exp_avg"),
            Role::FirstMoment
        );
        assert_eq!(
            role_of(&[], "__trainer__/optimizer/state/3/step", DType::F32, &[]),
            Role::Counter
        );
        assert_eq!(
            r("__trainer__/optimizer/optimizer/state/0/exp_avg_sq"),
            Role::SecondMoment
        );
        assert_eq!(
            r("__trainer__/optimizer/fp32_from_fp16_params/0/7"),
            Role::Weight
        );
        assert_eq!(r("optimizer_states/0/state/12/exp_avg"), Role::FirstMoment);
        assert_eq!(
            r("optim.state.model.layers.0.weight.exp_avg_sq"),
            Role::SecondMoment
        );
        assert_eq!(r("optimizer/state/0/momentum_buffer"), Role::FirstMoment);
        assert_eq!(r("optimizer/state/0/square_avg"), Role::SecondMoment);
        assert_eq!(r("optimizer/state/0/sum"), Role::SecondMoment);
        assert_eq!(r("__trainer__/lr_scheduler/base_lrs/0"), Role::State);
        assert_eq!(
            role_of(&[], "__trainer__/rng/cpu", DType::U8, &[5056]),
            Role::State
        );
        assert_eq!(
            role_of(&[], "bn.num_batches_tracked", DType::I64, &[]),
            Role::Counter
        );
        // Model weights, also ones whose last component is a common word.
        assert_eq!(r("blocks.0.attn.in_proj_weight"), Role::Weight);
        assert_eq!(r("model.pooler.sum"), Role::Weight);
        assert_eq!(r("encoder.layer.3.attention.self.mu"), Role::Weight);
    }

    #[test]
    fn rules_come_first() {
        let rules = [RoleRule {
            pattern: "custom.*.acc".into(),
            role: Role::SecondMoment,
        }];
        assert_eq!(
            role_of(&rules, "custom.w.acc", DType::F32, &[4, 4]),
            Role::SecondMoment
        );
        assert_eq!(
            role_of(&rules, "custom.w", DType::F32, &[4, 4]),
            Role::Weight
        );
        assert_eq!(Role::parse("second_moment"), Some(Role::SecondMoment));
        assert_eq!(Role::parse("nothing"), None);
        for role in [
            Role::Weight,
            Role::FirstMoment,
            Role::SecondMoment,
            Role::Counter,
            Role::State,
        ] {
            assert_eq!(Role::parse(role.name()), Some(role));
        }
    }
}
