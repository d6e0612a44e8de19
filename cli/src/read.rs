//! `strata export` and `strata get`: data out of the store.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use strata_store::{to_f64, DType, Store, StoreError};

use crate::fmt::{fidelity, fidelity_json, mb, mb_s, ms, shape};
use crate::npy::npy_header;
use crate::progress::Output;
use crate::{CliError, CliResult};

/// Values `strata get` prints when it writes no file.
const HEAD: usize = 8;

/// `strata export`.
pub(crate) fn export(out: &Output, store: &Path, step: u64, output: &Path) -> CliResult {
    if crate::remote::is_url(store) {
        return crate::remote::export(out, store, step, output);
    }
    let store = Store::open_read_only(store)?;
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

/// `strata get`: streams the tensor block by block, into the `.npy` file or past the
/// summary (only the first values are converted), so a tensor of any size is read in bounded
/// memory.
pub(crate) fn get(
    store: &Path,
    tensor: &str,
    step: u64,
    at: bool,
    json: bool,
    output: Option<&Path>,
) -> CliResult {
    if crate::remote::is_url(store) {
        return crate::remote::get(store, tensor, step, at, output);
    }
    let store = Store::open_read_only(store)?;
    let t = Instant::now();
    let found = if at {
        store.step_at_or_before(tensor, step)?
    } else {
        step
    };
    let info = store.version_info(tensor, found)?;
    let size = info.dtype.size();
    let mut head: Vec<f64> = Vec::new();
    let mut bytes = 0u64;
    let mut file = match output {
        Some(path) => {
            let io = |source| CliError::Io {
                path: path.to_path_buf(),
                source,
            };
            let mut w = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
            w.write_all(&npy_header(info.dtype, &info.shape))
                .map_err(io)?;
            Some((w, path))
        }
        None => None,
    };
    let read = store.get_blocks(tensor, found, |_, block| {
        bytes += block.len() as u64;
        match &mut file {
            Some((w, path)) => w.write_all(block).map_err(|source| StoreError::Io {
                path: path.to_path_buf(),
                source,
            })?,
            None if head.len() <= HEAD => {
                let want = (HEAD + 1 - head.len()).min(block.len() / size);
                head.extend(to_f64(info.dtype, &block[..want * size]));
            }
            None => {}
        }
        Ok(())
    })?;
    if read.dtype != info.dtype || read.shape != info.shape {
        return Err(CliError::Other(format!(
            "{tensor} step {found} was replaced while it was read; read it again"
        )));
    }
    if let Some((mut w, path)) = file {
        w.flush().map_err(|source| CliError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let dt = t.elapsed();
    if json {
        let doc = serde_json::json!({
            "tensor": tensor,
            "step": found,
            "dtype": read.dtype.to_string(),
            "shape": read.shape,
            "bytes": bytes,
            "fidelity": fidelity_json(&read.fidelity),
            "read_ms": dt.as_secs_f64() * 1e3,
            "output": output.map(|p| p.display().to_string()),
            "head": output.is_none().then(|| &head[..head.len().min(HEAD)]),
        });
        say!("{doc:#}");
        return Ok(());
    }
    let what = format!(
        "{tensor} step {found}: {} {}, {} bytes, read in {}",
        read.dtype,
        shape(&read.shape),
        bytes,
        ms(dt)
    );
    match output {
        Some(path) => say!("wrote {}: {what}", path.display()),
        None => say!("{what}"),
    }
    say!("fidelity: {}", fidelity(&read.fidelity));
    match output {
        Some(_) if read.dtype == DType::BF16 => say!(
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

/// Parses `I` or `I..J` into an element range.
pub(crate) fn parse_index(text: &str) -> Result<std::ops::Range<u64>, CliError> {
    let bad = || CliError::Usage(format!("--index {text:?}: expected I or I..J"));
    match text.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (
                a.trim().parse().map_err(|_| bad())?,
                b.trim().parse().map_err(|_| bad())?,
            );
            if a >= b {
                return Err(bad());
            }
            Ok(a..b)
        }
        None => {
            let i: u64 = text.trim().parse().map_err(|_| bad())?;
            Ok(i..i + 1)
        }
    }
}

/// `strata history`.
pub(crate) fn history(
    store: &Path,
    tensor: &str,
    index: &str,
    from: Option<u64>,
    to: Option<u64>,
    json: bool,
) -> CliResult {
    let elems = parse_index(index)?;
    let steps = from.unwrap_or(0)..=to.unwrap_or(u64::MAX);
    if crate::remote::is_url(store) {
        return crate::remote::history(store, tensor, elems, steps, json);
    }
    let store = Store::open_read_only(store)?;
    let t = Instant::now();
    let rows = store.history(tensor, elems.clone(), steps)?;
    print_history(tensor, &elems, &rows, t.elapsed(), json)
}

/// Prints the rows of `strata history`.
pub(crate) fn print_history(
    tensor: &str,
    elems: &std::ops::Range<u64>,
    rows: &[(u64, strata_store::TensorSlice)],
    dt: std::time::Duration,
    json: bool,
) -> CliResult {
    if json {
        let doc: Vec<serde_json::Value> = rows
            .iter()
            .map(|(step, s)| {
                serde_json::json!({
                    "step": step,
                    "dtype": s.dtype.to_string(),
                    "values": s.to_f64(),
                    "fidelity": fidelity_json(&s.fidelity),
                })
            })
            .collect();
        say!(
            "{:#}",
            serde_json::json!({
                "tensor": tensor,
                "elements": [elems.start, elems.end],
                "read_ms": dt.as_secs_f64() * 1e3,
                "versions": doc,
            })
        );
        return Ok(());
    }
    say!(
        "{tensor} elements {}..{}: {} versions read in {}",
        elems.start,
        elems.end,
        rows.len(),
        ms(dt)
    );
    for (step, s) in rows {
        let values: Vec<String> = s.to_f64().iter().map(|v| format!("{v:.6}")).collect();
        let worth = if s.fidelity.is_exact() {
            String::new()
        } else {
            format!("  ({})", fidelity(&s.fidelity))
        };
        say!("{step:>10}  [{}]{worth}", values.join(", "));
    }
    Ok(())
}
