//! Drifting f32 tensors saved as checkpoints: the training loop the benches that time saves
//! run (`close-trim-bench`, `retain-bench`). Not an example of its own: each bench includes it
//! with `#[path]`.

use strata::codec::DType;
use strata::store::{Store, StoreError, TensorRef};
use strata_testkit::noise::{f32_bytes, noise};

/// A model's tensors and how they change per save.
pub(crate) struct Drifting {
    tensors: Vec<Vec<f32>>,
    /// One value in `every` drifts per save.
    every: usize,
    step: u64,
}

impl Drifting {
    /// A training state: weights and AdamW's two moments, 12 tensors of f32 whose sizes add up
    /// to about `mb` MB, every value drifting a little per save (a delta costs about a
    /// keyframe).
    pub(crate) fn training_state(mb: usize) -> Drifting {
        // Sizes in the proportions 1:2:3:4, three times (weights and two moments).
        let unit = (mb << 20) / 4 / 30;
        let tensors = (0..12)
            .map(|i| noise(unit * (1 + i % 4), i as u64))
            .collect();
        Drifting {
            tensors,
            every: 1,
            step: 0,
        }
    }

    /// `mb` MB of f32 weights in 16 MB tensors, a seventh of the values nudged per save (a
    /// delta costs a small fraction of a keyframe).
    #[allow(dead_code)] // close-trim-bench saves training state only
    pub(crate) fn weights(mb: usize) -> Drifting {
        let tensors = (0..mb / 16).map(|i| noise(4 << 20, i as u64)).collect();
        Drifting {
            tensors,
            every: 7,
            step: 0,
        }
    }

    /// The next step: 10 steps on, its values drifted.
    pub(crate) fn advance(&mut self) {
        self.step += 10;
        for (i, t) in self.tensors.iter_mut().enumerate() {
            let d = noise(t.len(), 1000 * self.step + i as u64);
            for (x, e) in t.iter_mut().zip(d).step_by(self.every) {
                *x += 1e-3 * e;
            }
        }
    }

    /// Saves the current step as a checkpoint of `store`.
    pub(crate) fn save(&self, store: &Store) -> Result<(), StoreError> {
        let bytes: Vec<Vec<u8>> = self.tensors.iter().map(|t| f32_bytes(t)).collect();
        let shapes: Vec<[u64; 1]> = self.tensors.iter().map(|t| [t.len() as u64]).collect();
        let mut w = store.begin_checkpoint(self.step, "")?;
        for (i, (b, shape)) in bytes.iter().zip(&shapes).enumerate() {
            let t = TensorRef {
                dtype: DType::F32,
                shape,
                bytes: b,
            };
            w.put(&format!("layer.{i}"), &t)?;
        }
        w.commit()
    }
}
