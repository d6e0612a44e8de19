//! delta-policy: what keeping the newest checkpoint as a keyframe would cost, measured with
//! the codec on real series (issue 28, decision 1; ADR 0006).
//!
//! ```text
//! cargo run --release --example delta-policy -- [--series DIR]... [--max-chain 6] [--json]
//! ```
//!
//! Each series (a folder of `step_NNNNNN.safetensors`; default: the shared series
//! `../shared/data/series/{dev_ft,dev_pre}` and their `bf16` when present, else the committed
//! ones) is cut into the store's blocks (1 MiB of raw bytes), and every block's history is
//! laid out under three policies, each segment encoded and decoded by the codec (one thread,
//! default lossless options; every decode compared with its input):
//!
//! - **forward** (the store today, ADR 0006): each version a delta against the one before,
//!   anchored on the lineage's keyframe when the chain is full ([`DeltaRule`]). The newest
//!   version sits anywhere from 1 to `max_chain` segments deep.
//! - **forward, thrifty**: forward, but a delta that saves under 3 % of its lineage's keyframe
//!   is written as a keyframe instead (it shortens the chain for nothing it keeps).
//! - **reverse**: the newest version a keyframe, each older one a delta against the version
//!   after it, and every `max_chain`-th version (step index) kept a keyframe so that no read
//!   decodes more than `max_chain` segments. A write encodes the new keyframe and re-encodes
//!   the previous newest against it.
//! - **reverse, anchored**: as reverse, but where the chain below the newest is full the next
//!   older version is an anchor, a delta against the newest keyframe (the mirror image of
//!   forward's anchors), so older keyframes are not kept. A write also re-encodes every
//!   anchor against the new keyframe.
//!
//! A block identical to the version it would delta against costs nothing (the store keeps a
//! reference). Figures: bytes of segments (no metadata) and raw over them; read seconds of a
//! version: the decode time of every segment of its chain, summed over its blocks; the newest
//! version's read; the slowest read of any version; the encode seconds of the last write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use strata::codec::chain::{keep_anchor, Base, DeltaRule, Link, DEFAULT_MAX_CHAIN};
use strata::codec::lossless::LosslessOptions;
use strata::codec::segment::{self, Segment};
use strata::codec::DType;
use strata::store::dtype_from_safetensors;
use strata::store::safetensors::SafeTensors;
use strata_testkit::series::{list_step_files, series_root};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str =
    "usage: delta-policy [--series DIR]... [--max-chain N] [--json]  (see the file's doc)";
/// Forward, thrifty: a delta must save this share of its lineage's keyframe.
const THRIFT: f64 = 0.03;
/// Raw bytes of a block, as the store cuts tensors by default.
const BLOCK_BYTES: usize = 1 << 20;

struct Args {
    series: Vec<PathBuf>,
    max_chain: u8,
    json: bool,
}

fn args() -> Res<Args> {
    let mut a = Args {
        series: Vec::new(),
        max_chain: DEFAULT_MAX_CHAIN,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--series" => a.series.push(value("a folder")?.into()),
            "--max-chain" => a.max_chain = value("a number")?.parse()?,
            "--json" => a.json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if a.max_chain < 2 {
        return Err("--max-chain must be at least 2".into());
    }
    if a.series.is_empty() {
        let base = series_root();
        for s in ["dev_ft", "dev_ft/bf16", "dev_pre", "dev_pre/bf16"] {
            a.series.push(base.join(s));
        }
    }
    Ok(a)
}

/// One block's versions, oldest first.
struct BlockHistory {
    dtype: DType,
    versions: Vec<Vec<u8>>,
}

/// The blocks of every tensor that keeps its dtype and size through the series (the others
/// are no lineage to measure), their raw bytes in all versions, and the checkpoints.
fn blocks_of(dir: &Path) -> Res<(Vec<BlockHistory>, u64, usize)> {
    let files = list_step_files(dir)?;
    if files.len() < 2 {
        return Err(format!("{}: fewer than 2 checkpoints", dir.display()).into());
    }
    let mut tensors: HashMap<String, (DType, Vec<Vec<u8>>)> = HashMap::new();
    for (_, path) in &files {
        let bytes = std::fs::read(path)?;
        let st = SafeTensors::deserialize(&bytes)?;
        for (name, view) in st.tensors() {
            let dtype = dtype_from_safetensors(view.dtype())
                .ok_or(format!("{}: {name}: unsupported dtype", path.display()))?;
            let entry = tensors.entry(name).or_insert((dtype, Vec::new()));
            if entry.0 == dtype {
                entry.1.push(view.data().to_vec());
            }
        }
    }
    let mut names: Vec<_> = tensors.keys().cloned().collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let (dtype, versions) = &tensors[&name];
        let len = versions[0].len();
        if versions.len() != files.len() || versions.iter().any(|v| v.len() != len) || len == 0 {
            continue;
        }
        let per = (BLOCK_BYTES / dtype.size()).max(1) * dtype.size();
        for start in (0..len).step_by(per) {
            let end = (start + per).min(len);
            out.push(BlockHistory {
                dtype: *dtype,
                versions: versions.iter().map(|v| v[start..end].to_vec()).collect(),
            });
        }
    }
    let raw = out
        .iter()
        .flat_map(|b| &b.versions)
        .map(|v| v.len() as u64)
        .sum();
    Ok((out, raw, files.len()))
}

/// A segment's bytes and the seconds to encode and to decode it (0 for a reference).
#[derive(Clone, Copy, Default)]
struct Cost {
    bytes: u64,
    encode_s: f64,
    decode_s: f64,
}

/// The segments of one block's history, each encoded once however many policies use it.
struct Segments<'b> {
    block: &'b BlockHistory,
    opts: LosslessOptions,
    memo: HashMap<(usize, Option<usize>), Cost>,
}

impl<'b> Segments<'b> {
    /// Version `v` as a keyframe (`base` None) or a delta against version `base`.
    fn cost(&mut self, v: usize, base: Option<usize>) -> Res<Cost> {
        if let Some(c) = self.memo.get(&(v, base)) {
            return Ok(*c);
        }
        let b = self.block;
        let data = &b.versions[v];
        let base_data = base.map(|i| b.versions[i].as_slice());
        let c = if base_data == Some(data.as_slice()) {
            Cost::default()
        } else {
            let t = Instant::now();
            let seg = match base_data {
                Some(bd) => segment::encode_delta(b.dtype, data, bd, &self.opts)?,
                None => segment::encode_keyframe(b.dtype, data, &self.opts)?,
            };
            let encode_s = t.elapsed().as_secs_f64();
            let mut out = vec![0u8; data.len()];
            let t = Instant::now();
            Segment::parse(&seg)?.decode_lossless_into(base_data, &mut out)?;
            let decode_s = t.elapsed().as_secs_f64();
            if &out != data {
                return Err(format!("version {v} against {base:?} does not round-trip").into());
            }
            Cost {
                bytes: seg.len() as u64,
                encode_s,
                decode_s,
            }
        };
        self.memo.insert((v, base), c);
        Ok(c)
    }
}

/// One block's layout under a policy: each version's base (None: a keyframe).
type Layout = Vec<Option<usize>>;

/// The store's rule today, over the first `n` versions.
fn forward(seg: &mut Segments<'_>, n: usize, max_chain: u8, thrift: Option<f64>) -> Res<Layout> {
    let rule = DeltaRule::new(Default::default(), max_chain);
    let (mut bases, mut links): (Layout, Vec<Link>) = (vec![None], vec![Link::KEYFRAME]);
    let mut root = 0;
    for v in 1..n {
        let pred = links[v - 1];
        let root_link = rule.root_needed(pred).map(|_| links[root]);
        let (base, link) = match rule.choose(pred, root_link) {
            b @ Base::Predecessor { .. } => {
                // Thrifty: a delta that saves less than `t` of the lineage's keyframe is
                // not worth its place in the chain.
                let delta = seg.cost(v, Some(v - 1))?.bytes as f64;
                let keyframe = seg.cost(root, None)?.bytes as f64;
                match thrift {
                    Some(t) if delta >= (1.0 - t) * keyframe => (None, Link::KEYFRAME),
                    _ => (Some(v - 1), b.link()),
                }
            }
            b @ Base::Root { anchor, .. } => {
                let delta = seg.cost(v, Some(root))?.bytes as usize;
                let keyframe = seg.cost(root, None)?.bytes as usize;
                if anchor && !keep_anchor(delta, keyframe) {
                    (None, Link::KEYFRAME)
                } else {
                    (Some(root), b.link())
                }
            }
            Base::Keyframe => (None, Link::KEYFRAME),
        };
        if base.is_none() {
            root = v;
        }
        bases.push(base);
        links.push(link);
    }
    Ok(bases)
}

/// The newest of `n` versions a keyframe, older versions against the next, a keyframe every
/// `m` versions.
fn reverse(n: usize, m: usize) -> Layout {
    (0..n)
        .map(|v| (v + 1 < n && v % m != 0).then_some(v + 1))
        .collect()
}

/// The newest of the first `n` versions a keyframe, older versions against the next, and an
/// anchor against the newest where the chain below it is full (or a keyframe, where the
/// anchor is not worth keeping).
fn reverse_anchored(seg: &mut Segments<'_>, n: usize, m: usize) -> Res<Layout> {
    let newest = n - 1;
    let mut bases: Layout = vec![None; n];
    let mut depth = 1;
    for v in (0..newest).rev() {
        if depth < m {
            bases[v] = Some(v + 1);
            depth += 1;
        } else {
            let delta = seg.cost(v, Some(newest))?.bytes as usize;
            let keyframe = seg.cost(newest, None)?.bytes as usize;
            if keep_anchor(delta, keyframe) {
                bases[v] = Some(newest);
                depth = 2;
            } else {
                depth = 1;
            }
        }
    }
    Ok(bases)
}

/// Totals of one policy over all blocks.
#[derive(Default)]
struct Totals {
    bytes: u64,
    /// Per version: the seconds to decode it (every block's chain).
    read_s: Vec<f64>,
    /// Per version: the deepest chain of its blocks.
    depth: Vec<usize>,
    /// Per write (of versions 1..): the seconds to encode what it writes or rewrites.
    write_s: Vec<f64>,
}

impl Totals {
    /// Adds a block whose layout after writing the first `k` versions is `layout(seg, k)`.
    fn add(
        &mut self,
        seg: &mut Segments<'_>,
        layout: &mut dyn FnMut(&mut Segments<'_>, usize) -> Res<Layout>,
    ) -> Res<()> {
        let n = seg.block.versions.len();
        self.read_s.resize(n, 0.0);
        self.depth.resize(n, 0);
        self.write_s.resize(n - 1, 0.0);
        // A write encodes every segment of the new layout that the old one did not have.
        let mut before = layout(seg, 1)?;
        for k in 2..=n {
            let after = layout(seg, k)?;
            for (v, &base) in after.iter().enumerate() {
                if before.get(v) != Some(&base) {
                    self.write_s[k - 2] += seg.cost(v, base)?.encode_s;
                }
            }
            before = after;
        }
        let bases = before;
        for (v, &base) in bases.iter().enumerate() {
            self.bytes += seg.cost(v, base)?.bytes;
            let (mut at, mut depth, mut s) = (Some(v), 0, 0.0);
            while let Some(x) = at {
                s += seg.cost(x, bases[x])?.decode_s;
                depth += 1;
                at = bases[x];
                if depth > n {
                    return Err("a layout with a cycle".into());
                }
            }
            self.read_s[v] += s;
            self.depth[v] = self.depth[v].max(depth);
        }
        Ok(())
    }

    fn row(&self, raw: u64, forward_bytes: u64) -> Value {
        let newest = self.read_s.len() - 1;
        json!({
            "segment_bytes": self.bytes,
            "ratio": raw as f64 / self.bytes.max(1) as f64,
            "bytes_over_forward": self.bytes as f64 / forward_bytes.max(1) as f64,
            "newest_depth": self.depth[newest],
            "max_depth": self.depth.iter().max(),
            "newest_read_s": self.read_s[newest],
            "max_read_s": self.read_s.iter().cloned().fold(0.0, f64::max),
            "mean_write_encode_s": self.write_s.iter().sum::<f64>() / self.write_s.len().max(1) as f64,
            "max_write_encode_s": self.write_s.iter().cloned().fold(0.0, f64::max),
        })
    }
}

fn measure(dir: &Path, max_chain: u8) -> Res<Value> {
    let (blocks, raw, steps) = blocks_of(dir)?;
    let m = usize::from(max_chain);
    let (mut fwd, mut rev, mut anch) = (Totals::default(), Totals::default(), Totals::default());
    let mut thrifty = Totals::default();
    for block in &blocks {
        let mut seg = Segments {
            block,
            opts: LosslessOptions::default(),
            memo: HashMap::new(),
        };
        fwd.add(&mut seg, &mut |seg, k| forward(seg, k, max_chain, None))?;
        thrifty.add(&mut seg, &mut |seg, k| {
            forward(seg, k, max_chain, Some(THRIFT))
        })?;
        rev.add(&mut seg, &mut |_, k| Ok(reverse(k, m)))?;
        anch.add(&mut seg, &mut |seg, k| reverse_anchored(seg, k, m))?;
    }
    Ok(json!({
        "series": dir.display().to_string(),
        "steps": steps,
        "raw_bytes": raw,
        "blocks": blocks.len(),
        "forward": fwd.row(raw, fwd.bytes),
        "reverse": rev.row(raw, fwd.bytes),
        "reverse_anchored": anch.row(raw, fwd.bytes),
        "forward_thrifty": thrifty.row(raw, fwd.bytes),
    }))
}

fn main() -> ExitCode {
    let run = || -> Res<()> {
        let a = args()?;
        let mut out = Vec::new();
        for dir in &a.series {
            out.push(measure(dir, a.max_chain)?);
        }
        if a.json {
            println!("{}", json!({ "max_chain": a.max_chain, "series": out }));
            return Ok(());
        }
        println!(
            "| series | policy | segment MB | raw / segments | x forward's bytes | newest depth | deepest | newest read ms | slowest read ms | write encode ms, mean | worst |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for s in &out {
            for p in ["forward", "forward_thrifty", "reverse", "reverse_anchored"] {
                let r = &s[p];
                let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
                println!(
                    "| {} ({} steps) | {} | {:.2} | {:.3} | {:.3} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    s["series"].as_str().unwrap_or("?"),
                    s["steps"],
                    p.replace('_', ", "),
                    f("segment_bytes") / 1e6,
                    f("ratio"),
                    f("bytes_over_forward"),
                    r["newest_depth"],
                    r["max_depth"],
                    f("newest_read_s") * 1e3,
                    f("max_read_s") * 1e3,
                    f("mean_write_encode_s") * 1e3,
                    f("max_write_encode_s") * 1e3,
                );
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("delta-policy: {e}");
            ExitCode::FAILURE
        }
    }
}
