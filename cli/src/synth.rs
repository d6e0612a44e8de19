//! A small synthetic training series for the demo when the real data is missing: a few bf16
//! weights that drift by small random updates, like a fine-tuning run.

/// One tensor of a synthetic checkpoint: name, shape, little-endian bf16 bytes.
pub(crate) type SynthTensor = (String, Vec<u64>, Vec<u8>);

/// A deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Roughly normal (sum of four uniforms), unit variance.
    fn normal(&mut self) -> f32 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform()) * 0.866
    }
}

/// `steps` checkpoints (steps 0, 10, 20, ...) of a 2-layer model of width 128.
pub(crate) fn series(steps: u64) -> Vec<(u64, Vec<SynthTensor>)> {
    let width = 128u64;
    let mut shapes: Vec<(String, Vec<u64>)> = vec![("embed.weight".into(), vec![512, width])];
    for l in 0..2 {
        shapes.push((format!("layer.{l}.attn.qkv.weight"), vec![3 * width, width]));
        shapes.push((format!("layer.{l}.mlp.up.weight"), vec![4 * width, width]));
        shapes.push((format!("layer.{l}.mlp.down.weight"), vec![width, 4 * width]));
        shapes.push((format!("layer.{l}.norm.weight"), vec![width]));
    }
    let mut rng = Rng(0x05EE_D0F5_7A7A);
    let mut weights: Vec<Vec<f32>> = shapes
        .iter()
        .map(|(name, shape)| {
            let n: u64 = shape.iter().product();
            if name.ends_with("norm.weight") {
                vec![1.0; n as usize]
            } else {
                (0..n).map(|_| rng.normal() * 0.02).collect()
            }
        })
        .collect();
    let mut out = Vec::new();
    for s in 0..steps {
        let tensors = shapes
            .iter()
            .zip(&weights)
            .map(|((name, shape), w)| {
                let bytes = w
                    .iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect();
                (name.clone(), shape.clone(), bytes)
            })
            .collect();
        out.push((s * 10, tensors));
        // A training step: small updates, larger on a random third of the values.
        for w in &mut weights {
            for x in w.iter_mut() {
                let big = rng.next().is_multiple_of(3);
                let scale = if big { 2e-3 } else { 1e-4 };
                *x += rng.normal() * scale * x.abs().max(0.01);
            }
        }
    }
    out
}
