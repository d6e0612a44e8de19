//! make-testdata: cuts the committed series (`testdata/series`) from the shared one
//! (`../shared/data/series`): the checkpoints and tensors listed in `testdata/cut.rs`, bytes
//! unchanged. Running it again writes the same files, bit for bit.
//!
//! ```text
//! cargo run --release --example make-testdata [-- SHARED_SERIES [OUT]]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

mod cut;

fn main() -> ExitCode {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = std::env::args().skip(1);
    let src = args
        .next()
        .map_or_else(|| root.join("../shared/data/series"), PathBuf::from);
    let out = args
        .next()
        .map_or_else(|| root.join("testdata/series"), PathBuf::from);
    match run(&src, &out) {
        Ok(total) => {
            println!("{total} bytes in {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make-testdata: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(src: &std::path::Path, out: &std::path::Path) -> Result<u64, String> {
    let mut total = 0u64;
    for rel in cut::files() {
        let from = src.join(&rel);
        let bytes = std::fs::read(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        let cut = cut::cut(&bytes).map_err(|e| format!("{}: {e}", from.display()))?;
        let to = out.join(&rel);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(&to, &cut).map_err(|e| format!("{}: {e}", to.display()))?;
        println!("{rel}: {} bytes", cut.len());
        total += cut.len() as u64;
    }
    Ok(total)
}
