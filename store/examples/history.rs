//! The analyst's use of Strata: how one weight evolved across a pre-training run. Opens a
//! store built from `../shared/data/series/dev_pre` (else the committed
//! `testdata/series/dev_pre`; importing it when the store does not exist yet), prints a
//! tensor's norm and a few elements at every step, and a diff between two steps.
//!
//! ```sh
//! cargo run --release -p strata-store --example history [-- STORE [TENSOR [STEP_A STEP_B]]]
//! ```

use std::error::Error;
use std::path::{Path, PathBuf};

use strata_store::Store;

const SERIES: &str = "shared/data/series/dev_pre";

/// The dev_pre folder: `../shared/...` from the current directory, else beside the workspace,
/// else the committed cut of it (`testdata/series/dev_pre`, three checkpoints of five tensors).
fn data_dir() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = root.join("..").join(SERIES);
    let committed = root.join("testdata/series/dev_pre");
    [Path::new("..").join(SERIES), built, committed]
        .into_iter()
        .find(|p| p.is_dir())
}

/// Imports every `step_N.safetensors` of `dir`.
fn import(store: &mut Store, dir: &Path) -> Result<(), Box<dyn Error>> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let step = name
                .strip_prefix("step_")?
                .strip_suffix(".safetensors")?
                .parse()
                .ok()?;
            Some((step, p))
        })
        .collect();
    files.sort();
    for (step, file) in &files {
        let r = store.import_safetensors(file, *step)?;
        println!("imported step {step}: {} tensors", r.tensors);
    }
    store.compact()?;
    Ok(())
}

fn l2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("strata-history-dev_pre.strata"));
    let fresh = !path.exists();
    let mut store = Store::open(&path)?;
    if fresh {
        let dir =
            data_dir().ok_or("no dev_pre series (../shared/data/series or testdata/series)")?;
        println!("building {} from {}", path.display(), dir.display());
        import(&mut store, &dir)?;
    }
    let steps = store.checkpoints()?;
    let (&first, &last) = match (steps.first(), steps.last()) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err("the store has no checkpoints".into()),
    };

    // The tensor: from the command line, else the largest matrix.
    let name = match args.get(1) {
        Some(n) => n.clone(),
        None => {
            let mut best = (0u64, String::new());
            for n in store.tensors()? {
                if let Some(v) = store.versions(&n)?.pop() {
                    let elems: u64 = v.shape.iter().product();
                    if v.shape.len() >= 2 && elems > best.0 {
                        best = (elems, n);
                    }
                }
            }
            best.1
        }
    };
    let step_a = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(first);
    let step_b = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(last);

    println!("\n{name}: norm and elements 0..4 at every step");
    println!(
        "{:>6}  {:>10}  {:>10}  elements 0..4",
        "step", "L2 norm", "mean |x|"
    );
    for &step in &steps {
        let t = store.get(&name, step)?;
        let v = t.to_f64();
        let mean_abs = v.iter().map(|x| x.abs()).sum::<f64>() / v.len().max(1) as f64;
        let head: Vec<String> = v.iter().take(4).map(|x| format!("{x:+.5}")).collect();
        println!(
            "{step:>6}  {:>10.4}  {:>10.6}  {}",
            l2(&v),
            mean_abs,
            head.join(" ")
        );
    }

    let a = store.get(&name, step_a)?.to_f64();
    let b = store.get(&name, step_b)?.to_f64();
    let diff: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y - x).collect();
    let max_abs = diff.iter().fold(0.0f64, |m, d| m.max(d.abs()));
    let changed = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count();
    println!(
        "\ndiff {step_a} -> {step_b}: max |change| {max_abs:.6}, {:.2}% of {} elements changed, \
         |change| / |{step_a}| = {:.4}",
        100.0 * changed as f64 / a.len().max(1) as f64,
        a.len(),
        l2(&diff) / l2(&a).max(f64::MIN_POSITIVE)
    );
    Ok(())
}
