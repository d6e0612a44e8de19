//! `strata export` and `strata get`: data out of the store.

use std::path::Path;
use std::time::Instant;

use strata_store::{DType, Store};

use crate::fmt::{fidelity, fidelity_json, mb, mb_s, ms, shape};
use crate::npy::save_npy;
use crate::progress::Output;
use crate::{CliError, CliResult};

/// Values `strata get` prints when it writes no file.
const HEAD: usize = 8;

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
    json: bool,
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
    if let Some(path) = output {
        save_npy(path, &data).map_err(|source| CliError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    }
    // The first values, when no file takes them.
    let head: Vec<f64> = match output {
        Some(_) => Vec::new(),
        None => data.to_f64().into_iter().take(HEAD + 1).collect(),
    };
    if json {
        let doc = serde_json::json!({
            "tensor": tensor,
            "step": found,
            "dtype": data.dtype.to_string(),
            "shape": data.shape,
            "bytes": data.data.len(),
            "fidelity": fidelity_json(&data.fidelity),
            "read_ms": dt.as_secs_f64() * 1e3,
            "output": output.map(|p| p.display().to_string()),
            "head": output.is_none().then(|| &head[..head.len().min(HEAD)]),
        });
        say!("{doc:#}");
        return Ok(());
    }
    let what = format!(
        "{tensor} step {found}: {} {}, {} bytes, read in {}",
        data.dtype,
        shape(&data.shape),
        data.data.len(),
        ms(dt)
    );
    match output {
        Some(path) => say!("wrote {}: {what}", path.display()),
        None => say!("{what}"),
    }
    say!("fidelity: {}", fidelity(&data.fidelity));
    match output {
        Some(_) if data.dtype == DType::BF16 => say!(
            "note: numpy has no bfloat16; the file holds the raw bf16 bits as '<u2' \
             (to f32: (a.astype(np.uint32) << 16).view(np.float32))"
        ),
        Some(_) => {}
        None => {
            let shown: Vec<String> = head.iter().take(HEAD).map(|v| format!("{v:.6}")).collect();
            let more = if head.len() > HEAD { ", ..." } else { "" };
            say!("[{}{more}]", shown.join(", "));
        }
    }
    Ok(())
}
