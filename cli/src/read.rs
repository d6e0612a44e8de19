//! `strata export` and `strata get`: data out of the store.

use std::path::Path;
use std::time::Instant;

use strata_store::{DType, Store};

use crate::fmt::{mb, mb_s, ms, shape};
use crate::npy::save_npy;
use crate::progress::Output;
use crate::{CliError, CliResult};

/// `strata export`.
pub(crate) fn export(out: &Output, store: &Path, step: u64, output: &Path) -> CliResult {
    let store = Store::open(store)?;
    let spinner = out.spinner("exporting");
    let t = Instant::now();
    let r = store.export_safetensors(step, output)?;
    let dt = t.elapsed();
    spinner.finish_and_clear();
    say!(
        "wrote {}: step {step}, {} tensors, raw {}, file {} bytes, {}",
        output.display(),
        r.tensors,
        mb(r.raw_bytes),
        r.file_bytes,
        mb_s(r.raw_bytes, dt)
    );
    Ok(())
}

/// `strata get`.
pub(crate) fn get(
    store: &Path,
    tensor: &str,
    step: u64,
    at: bool,
    output: Option<&Path>,
) -> CliResult {
    let store = Store::open(store)?;
    let t = Instant::now();
    let (found, data) = if at {
        store.get_at(tensor, step)?
    } else {
        (step, store.get(tensor, step)?)
    };
    let dt = t.elapsed();
    let what = format!(
        "{tensor} step {found}: {} {}, {} bytes, read in {}",
        data.dtype,
        shape(&data.shape),
        data.data.len(),
        ms(dt)
    );
    match output {
        Some(path) => {
            save_npy(path, &data).map_err(|source| CliError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            say!("wrote {}: {what}", path.display());
            if data.dtype == DType::BF16 {
                say!(
                    "note: numpy has no bfloat16; the file holds the raw bf16 bits as '<u2' \
                     (to f32: (a.astype(np.uint32) << 16).view(np.float32))"
                );
            }
        }
        None => {
            say!("{what}");
            let values = data.to_f64();
            let head: Vec<String> = values.iter().take(8).map(|v| format!("{v:.6}")).collect();
            let more = if values.len() > 8 { ", ..." } else { "" };
            say!("[{}{more}]", head.join(", "));
        }
    }
    Ok(())
}
