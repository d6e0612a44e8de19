//! The manifest of a checkpoint as the local store holds it (the byte layout is
//! `record/manifest.rs`).

use std::collections::BTreeMap;

use crate::engine::View;
use crate::error::RemoteError;
use crate::error::{NotFound, StoreError};
use crate::record::{Kind, Manifest};

/// The manifest of checkpoint `step` as `view` holds it. Tiered versions (quantized,
/// Tier 0 or frame blocks) are refused: a remote carries exact versions only.
pub(crate) fn of_checkpoint(
    view: &dyn View,
    step: u64,
    kind: Kind,
) -> Result<Manifest, RemoteError> {
    let cp = view
        .checkpoint(step)?
        .ok_or(StoreError::NotFound(NotFound::Checkpoint { step }))?;
    let mut versions = BTreeMap::new();
    for name in &cp.tensors {
        let mut todo = vec![step];
        while let Some(s) = todo.pop() {
            if versions.contains_key(&(name.clone(), s)) {
                continue;
            }
            let rec = view.version(name, s)?.ok_or_else(|| {
                StoreError::NotFound(NotFound::Version {
                    tensor: name.clone(),
                    step: s,
                })
            })?;
            for b in &rec.blocks {
                if !b.is_exact() {
                    return Err(RemoteError::Tiered {
                        tensor: name.clone(),
                        step: s,
                    });
                }
                todo.extend(b.base);
            }
            versions.insert((name.clone(), s), rec);
        }
    }
    Ok(Manifest {
        kind,
        step,
        metadata: cp.metadata,
        tensors: cp.tensors,
        versions,
    })
}
