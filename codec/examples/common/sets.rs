//! The sets the codec's examples measure (`plane-bench`, `entropy-probe`): a checkpoint's
//! tensors cut into the store's 1 MiB blocks, each a keyframe, or a folder of steps, each
//! block a delta against the same block of the step before. Not an example of its own: each
//! example includes it with `#[path]`.

use std::collections::BTreeMap;
use std::error::Error;

use safetensors::{Dtype, SafeTensors};
use strata_codec::DType;

type BoxError = Box<dyn Error>;

/// Raw bytes of a block (whole elements), as the store cuts a version.
const BLOCK: usize = 1 << 20;

/// One block of a set: its bytes, and its base's for a delta.
pub(crate) struct Block {
    pub(crate) dtype: DType,
    pub(crate) data: Vec<u8>,
    pub(crate) base: Option<Vec<u8>>,
}

/// The codec's dtype for a safetensors one; dtypes it has no name for are taken as raw bytes.
fn dtype_of(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::BF16 => DType::BF16,
        Dtype::F16 => DType::F16,
        Dtype::F64 => DType::F64,
        _ => DType::U8,
    }
}

/// The tensors of a safetensors file by name; F32 ones cast to bf16 when `to_bf16`.
fn load(path: &str, to_bf16: bool) -> Result<BTreeMap<String, (DType, Vec<u8>)>, BoxError> {
    let bytes = std::fs::read(path)?;
    let st = SafeTensors::deserialize(&bytes)?;
    let mut out = BTreeMap::new();
    for (name, v) in st.tensors() {
        let mut dtype = dtype_of(v.dtype());
        let mut data = v.data().to_vec();
        if to_bf16 && dtype == DType::F32 {
            data = data
                .chunks_exact(4)
                .flat_map(|c| {
                    let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    half::bf16::from_f32(x).to_bits().to_le_bytes()
                })
                .collect();
            dtype = DType::BF16;
        }
        out.insert(name, (dtype, data));
    }
    Ok(out)
}

/// Appends `data` (and its `base`) cut into blocks to `blocks`.
fn cut(dtype: DType, data: &[u8], base: Option<&[u8]>, blocks: &mut Vec<Block>) {
    let step = BLOCK / dtype.size() * dtype.size();
    for (i, c) in data.chunks(step).enumerate() {
        blocks.push(Block {
            dtype,
            data: c.to_vec(),
            base: base.map(|b| b[i * step..i * step + c.len()].to_vec()),
        });
    }
}

/// The blocks of a set: `key:FILE` and `key-bf16:FILE` (F32 cast to bf16) are keyframes,
/// tensors in name order; `delta:DIR` are the `*.safetensors` of DIR in name order, each
/// tensor after the first file a delta against the file before (a keyframe where that file
/// has no tensor of its name and length).
pub(crate) fn set_blocks(spec: &str) -> Result<Vec<Block>, BoxError> {
    let (kind, path) = spec.split_once(':').ok_or("SET is kind:path")?;
    let mut blocks = Vec::new();
    match kind {
        "key" | "key-bf16" => {
            for (_, (dtype, data)) in load(path, kind == "key-bf16")? {
                cut(dtype, &data, None, &mut blocks);
            }
        }
        "delta" => {
            let mut files: Vec<_> = std::fs::read_dir(path)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
                .collect();
            files.sort();
            let mut prev: Option<BTreeMap<String, (DType, Vec<u8>)>> = None;
            for f in files {
                let cur = load(f.to_str().ok_or("path")?, false)?;
                if let Some(p) = &prev {
                    for (name, (dtype, data)) in &cur {
                        match p.get(name) {
                            Some((_, b)) if b.len() == data.len() => {
                                cut(*dtype, data, Some(b), &mut blocks)
                            }
                            _ => cut(*dtype, data, None, &mut blocks),
                        }
                    }
                }
                prev = Some(cur);
            }
        }
        _ => return Err(format!("unknown set kind {kind}").into()),
    }
    Ok(blocks)
}
