//! Number and fidelity formatting shared by the commands.

use std::time::Duration;

use serde_json::json;
use strata_store::Fidelity;

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

/// What a read is worth, in words: `exact`, `aged, rel. error 1.00e-3 (measured when
/// aged)`, `5 bits, max rel. error 0.0333 (of each group's
/// max |x|)`, `reconstructed (depth 1), no bound claimed`, `zeros (Tier 0, no reconstruct
/// policy)`.
pub(crate) fn fidelity(f: &Fidelity) -> String {
    match *f {
        Fidelity::Exact => "exact".into(),
        Fidelity::Aged { rel_error } => {
            format!("aged, rel. error {rel_error:.2e} (measured when aged)")
        }
        Fidelity::Bounded {
            bits,
            max_rel_error,
        } => format!("{bits} bits, max rel. error {max_rel_error:.4} (of each group's max |x|)"),
        Fidelity::Reconstructed { depth } => {
            format!("reconstructed (depth {depth}), no bound claimed")
        }
        Fidelity::Zeros => "zeros (Tier 0, no reconstruct policy)".into(),
    }
}

/// [`fidelity`] as JSON: `{"kind": "exact"}`, `{"kind": "aged", "rel_error": 0.001}`,
/// `{"kind": "bounded", "bits": 5,
/// "max_rel_error": 0.0333}`, `{"kind": "reconstructed", "depth": 1}`, `{"kind": "zeros"}`.
pub(crate) fn fidelity_json(f: &Fidelity) -> serde_json::Value {
    match *f {
        Fidelity::Exact => json!({ "kind": "exact" }),
        Fidelity::Aged { rel_error } => json!({ "kind": "aged", "rel_error": rel_error }),
        Fidelity::Bounded {
            bits,
            max_rel_error,
        } => json!({ "kind": "bounded", "bits": bits, "max_rel_error": max_rel_error }),
        Fidelity::Reconstructed { depth } => json!({ "kind": "reconstructed", "depth": depth }),
        Fidelity::Zeros => json!({ "kind": "zeros" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fidelity_in_words_and_json() {
        let cases = [
            (Fidelity::Exact, "exact", json!({ "kind": "exact" })),
            (
                Fidelity::Aged { rel_error: 0.0025 },
                "aged, rel. error 2.50e-3 (measured when aged)",
                json!({ "kind": "aged", "rel_error": 0.0025 }),
            ),
            (
                Fidelity::Bounded {
                    bits: 5,
                    max_rel_error: 0.0333,
                },
                "5 bits, max rel. error 0.0333 (of each group's max |x|)",
                json!({ "kind": "bounded", "bits": 5, "max_rel_error": 0.0333 }),
            ),
            (
                Fidelity::Reconstructed { depth: 1 },
                "reconstructed (depth 1), no bound claimed",
                json!({ "kind": "reconstructed", "depth": 1 }),
            ),
            (
                Fidelity::Zeros,
                "zeros (Tier 0, no reconstruct policy)",
                json!({ "kind": "zeros" }),
            ),
        ];
        for (f, text, value) in cases {
            assert_eq!(fidelity(&f), text);
            assert_eq!(fidelity_json(&f), value);
        }
    }
}
