//! The trainer's use of Strata: save a small model's state every N steps with its step and
//! loss, "crash", reopen the store and restore step k bit-exact, then keep the last few
//! checkpoints and every 100th.
//!
//! ```sh
//! cargo run --release -p strata-store --example trainer [-- DIR]
//! ```

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;

use strata_store::{DType, RetainPolicy, Store, TensorRef};

/// Steps between checkpoints.
const EVERY: u64 = 20;
/// Last training step.
const STEPS: u64 = 200;
/// The step restored after the crash.
const RESTORE: u64 = 120;

/// A deterministic xorshift generator, uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// A state dict: name, shape, little-endian bytes per tensor.
type State = Vec<(String, Vec<u64>, Vec<u8>)>;

/// A model's state: named f32 tensors.
struct Model {
    tensors: Vec<(String, Vec<u64>, Vec<f32>)>,
}

impl Model {
    fn new(rng: &mut Rng) -> Self {
        let shapes: [(&str, &[u64]); 5] = [
            ("embed.weight", &[256, 64]),
            ("layer.0.weight", &[64, 64]),
            ("layer.0.bias", &[64]),
            ("layer.1.weight", &[64, 64]),
            ("head.weight", &[64, 256]),
        ];
        let tensors = shapes
            .iter()
            .map(|(name, shape)| {
                let n: u64 = shape.iter().product();
                let values = (0..n).map(|_| rng.uniform() * 0.05).collect();
                (name.to_string(), shape.to_vec(), values)
            })
            .collect();
        Model { tensors }
    }

    /// One optimizer step: every weight moves a little, against a noisy "gradient".
    fn train_step(&mut self, rng: &mut Rng, lr: f32) {
        for (_, _, values) in &mut self.tensors {
            for v in values.iter_mut() {
                *v -= lr * (*v * 0.1 + rng.uniform() * 0.01);
            }
        }
    }

    /// The state dict as little-endian bytes.
    fn state(&self) -> State {
        self.tensors
            .iter()
            .map(|(n, s, v)| {
                let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                (n.clone(), s.clone(), bytes)
            })
            .collect()
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("strata-trainer"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("trainer.strata");
    if path.exists() {
        std::fs::remove_file(&path)?;
    }

    // Train, saving a checkpoint every EVERY steps. Remember what was saved, to check later.
    let mut saved: BTreeMap<u64, State> = BTreeMap::new();
    {
        let store = Store::open(&path)?;
        let mut rng = Rng(0x7EA1_2024);
        let mut model = Model::new(&mut rng);
        for step in 0..=STEPS {
            if step > 0 {
                model.train_step(&mut rng, 1e-3);
            }
            if step % EVERY == 0 {
                let loss = 2.5 * (-(step as f64) / 150.0).exp() + 0.3;
                let state = model.state();
                let refs: Vec<(&str, TensorRef<'_>)> = state
                    .iter()
                    .map(|(n, s, b)| {
                        let t = TensorRef {
                            dtype: DType::F32,
                            shape: s,
                            bytes: b,
                        };
                        (n.as_str(), t)
                    })
                    .collect();
                let meta = format!("{{\"step\": {step}, \"loss\": {loss:.4}}}");
                store.save_checkpoint(step, &refs, &meta)?;
                println!(
                    "step {step:>4}: saved {} tensors, loss {loss:.4}",
                    refs.len()
                );
                saved.insert(step, state);
            }
        }
        println!("simulating a crash: the process loses its model and its store handle");
    }

    // Restart: reopen the store and restore step RESTORE.
    let mut store = Store::open(&path)?;
    println!(
        "reopened {}: checkpoints {:?}",
        path.display(),
        store.checkpoints()?
    );
    let cp = store.load_checkpoint(RESTORE)?;
    let meta: serde_json::Value = serde_json::from_str(&cp.metadata)?;
    let expected = &saved[&RESTORE];
    assert_eq!(cp.tensors.len(), expected.len());
    for ((name, t), (n, s, b)) in cp.tensors.iter().zip(expected) {
        assert_eq!(name, n);
        assert_eq!(&t.shape, s);
        assert!(t.data == *b, "{name} differs from what was saved");
    }
    println!(
        "restored step {} (loss {}): {} tensors, bit-exact",
        meta["step"],
        meta["loss"],
        cp.tensors.len()
    );

    // Keep the last 3 checkpoints and every 100th.
    let r = store.retain(&RetainPolicy {
        keep_last: Some(3),
        keep_every: Some(100),
        keep_tagged: true,
    })?;
    println!(
        "retain: kept {:?}, removed {} checkpoints; file {} -> {} bytes",
        r.kept,
        r.removed.len(),
        r.file_bytes_before,
        r.file_bytes_after
    );
    for step in &r.kept {
        let cp = store.load_checkpoint(*step)?;
        for ((name, t), (_, _, b)) in cp.tensors.iter().zip(&saved[step]) {
            assert!(t.data == *b, "{name} step {step} differs after retain");
        }
    }
    let s = store.stats()?;
    println!(
        "store: raw {} bytes, {} bytes on disk, ratio {:.2}; every kept checkpoint still bit-exact",
        s.raw_bytes,
        s.disk_bytes,
        s.ratio()
    );
    Ok(())
}
