//! What the committed series is cut from the shared one: which checkpoints, which tensors,
//! and the cut itself. Used by `testdata/make.rs` (which writes the files) and by
//! `tests/testdata.rs` (which checks that the committed files are this cut, bit for bit).

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

/// Series folders (relative to `series/`) and the steps kept from each. Every folder also
/// has a `bf16/` twin with the same steps. dev_ft keeps its start (step 350, which is
/// dev_pre's last checkpoint) and its last four consecutive steps; dev_pre its last three.
pub(crate) const SERIES: [(&str, &[u64]); 2] = [
    ("dev_ft", &[350, 400, 410, 420, 430]),
    ("dev_pre", &[250, 300, 350]),
];

/// The tensors kept from every checkpoint: a 2-D attention weight, its bias, a layer norm
/// (weight and bias) and the position embedding.
pub(crate) const TENSORS: [&str; 5] = [
    "blocks.0.attn.in_proj_bias",
    "blocks.0.attn.in_proj_weight",
    "blocks.0.ln1.bias",
    "blocks.0.ln1.weight",
    "pos.weight",
];

/// Every file of the committed series, as a path relative to `series/`, e.g.
/// `dev_ft/bf16/step_000350.safetensors`.
pub(crate) fn files() -> Vec<String> {
    let mut out = Vec::new();
    for (dir, steps) in SERIES {
        for sub in ["", "/bf16"] {
            for step in steps {
                out.push(format!("{dir}{sub}/step_{step:06}.safetensors"));
            }
        }
    }
    out
}

/// The cut of one shared checkpoint file: the [`TENSORS`] with their dtype, shape and bytes
/// unchanged, no metadata, written by the safetensors crate (deterministic: tensors sorted
/// by dtype alignment, then name).
pub(crate) fn cut(shared_file: &[u8]) -> Result<Vec<u8>, String> {
    let st = SafeTensors::deserialize(shared_file).map_err(|e| format!("not safetensors: {e}"))?;
    let mut views = Vec::new();
    for name in TENSORS {
        let t = st.tensor(name).map_err(|e| format!("{name}: {e}"))?;
        let view = TensorView::new(t.dtype(), t.shape().to_vec(), t.data())
            .map_err(|e| format!("{name}: {e}"))?;
        views.push((name, view));
    }
    safetensors::serialize(views, None::<HashMap<String, String>>)
        .map_err(|e| format!("serialize: {e}"))
}
