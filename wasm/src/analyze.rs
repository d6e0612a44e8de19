//! What each tier costs and loses on one tensor: the figures the demo page shows, computed
//! by the same code natively and in WebAssembly.
//!
//! - **Lossless**: the tensor is cut into blocks of [`LOSSLESS_BLOCK_BYTES`] raw bytes (the
//!   store's default block) and each block is encoded as a keyframe with default options;
//!   stored bytes are the segments' lengths, headers included.
//! - **Tiers 8, 7, 5, 3**: a float tensor is widened to f32 and cut into blocks of the same
//!   number of elements, each quantized with [`QuantParams::new`] defaults (groups of 64,
//!   two-level 3-bit), then dequantized and compared with the original. Errors are given
//!   absolute (`|x - x̂|`) and relative to the largest magnitude of the value's group of
//!   [`ERROR_GROUP`] values (`|x - x̂| / max|x|`, the quantity ADR 0003 bounds by
//!   `1 / (2 * qmax)`; all-zero groups have no error): the largest and the mean of each. A tensor holding NaN or an infinity has no quantized form and is
//!   left out of the tier figures (`non_finite`).
//! - **Exponent histogram**: how often each exponent occurs (bf16 and f32: the 8-bit
//!   exponent field; f16: its 5 bits; f64: the top 8 of its 11 bits). This is the byte the
//!   lossless codec's rotation puts in a plane of its own.
//!
//! [`QuantParams::new`]: strata_codec::quant::QuantParams::new

use strata_codec::DType;

use crate::error::WasmError;
use crate::ops;

/// Raw bytes per block, as the store cuts versions (1 MiB).
pub const LOSSLESS_BLOCK_BYTES: usize = 1 << 20;
/// Values per group of the worst-group relative error.
pub const ERROR_GROUP: usize = 64;
/// The tiers measured, in report order.
pub const TIER_BITS: [u32; 4] = [8, 7, 5, 3];

/// Cost and error of one tier.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TierMeasure {
    /// Bits per code: 8, 7, 5 or 3.
    pub bits: u32,
    /// Bytes of the quantized segments, headers included.
    pub stored_bytes: u64,
    /// Largest `|x - x̂|`.
    pub max_abs_err: f64,
    /// Sum of `|x - x̂|` over every value.
    pub sum_abs_err: f64,
    /// Largest `|x - x̂| / max|x|` (the worst group's).
    pub max_rel_err: f64,
    /// Sum of `|x - x̂| / max|x|` over every value.
    pub sum_rel_err: f64,
}

/// The figures of one tensor, or the total of several ([`Analysis::merge`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// The dtype, or `None` for a total over several dtypes.
    pub dtype: Option<DType>,
    /// Elements.
    pub elements: u64,
    /// Raw bytes in the stored dtype.
    pub raw_bytes: u64,
    /// Bytes of the lossless segments.
    pub lossless_bytes: u64,
    /// Elements in the tier figures (float tensors without NaN or infinities).
    pub tier_elements: u64,
    /// Raw bytes of those elements (the base of the tier ratios).
    pub tier_raw_bytes: u64,
    /// Tensors left out of the tier figures because they hold NaN or an infinity.
    pub non_finite: u32,
    /// One entry per tier of [`TIER_BITS`].
    pub tiers: [TierMeasure; 4],
    /// Count of each exponent value (256 bins; f16 uses the first 32).
    pub exponent_hist: Vec<u64>,
}

impl Analysis {
    /// An empty total.
    pub fn empty() -> Self {
        Analysis {
            dtype: None,
            elements: 0,
            raw_bytes: 0,
            lossless_bytes: 0,
            tier_elements: 0,
            tier_raw_bytes: 0,
            non_finite: 0,
            tiers: TIER_BITS.map(|bits| TierMeasure {
                bits,
                ..TierMeasure::default()
            }),
            exponent_hist: vec![0; 256],
        }
    }

    /// Adds another tensor's figures to this total.
    pub fn merge(&mut self, other: &Analysis) {
        self.dtype = if self.elements == 0 {
            other.dtype
        } else if self.dtype == other.dtype {
            self.dtype
        } else {
            None
        };
        self.elements += other.elements;
        self.raw_bytes += other.raw_bytes;
        self.lossless_bytes += other.lossless_bytes;
        self.tier_elements += other.tier_elements;
        self.tier_raw_bytes += other.tier_raw_bytes;
        self.non_finite += other.non_finite;
        for (t, o) in self.tiers.iter_mut().zip(&other.tiers) {
            t.stored_bytes += o.stored_bytes;
            t.max_abs_err = t.max_abs_err.max(o.max_abs_err);
            t.sum_abs_err += o.sum_abs_err;
            t.max_rel_err = t.max_rel_err.max(o.max_rel_err);
            t.sum_rel_err += o.sum_rel_err;
        }
        for (h, o) in self.exponent_hist.iter_mut().zip(&other.exponent_hist) {
            *h += o;
        }
    }

    /// Raw bytes over lossless bytes.
    pub fn lossless_ratio(&self) -> f64 {
        ratio(self.raw_bytes, self.lossless_bytes)
    }

    /// Raw bytes over the tier's bytes (float tensors only), 0 when nothing was measured.
    pub fn tier_ratio(&self, i: usize) -> f64 {
        self.tiers
            .get(i)
            .map_or(0.0, |t| ratio(self.tier_raw_bytes, t.stored_bytes))
    }

    /// Mean `|x - x̂|` of a tier.
    pub fn mean_abs_err(&self, i: usize) -> f64 {
        match self.tiers.get(i) {
            Some(t) if self.tier_elements > 0 => t.sum_abs_err / self.tier_elements as f64,
            _ => 0.0,
        }
    }

    /// Mean `|x - x̂| / max|x|` of a tier (relative to each value's group maximum).
    pub fn mean_rel_err(&self, i: usize) -> f64 {
        match self.tiers.get(i) {
            Some(t) if self.tier_elements > 0 => t.sum_rel_err / self.tier_elements as f64,
            _ => 0.0,
        }
    }

    /// Stored bits per value of a tier (scales and headers included).
    pub fn tier_bits_per_value(&self, i: usize) -> f64 {
        match self.tiers.get(i) {
            Some(t) if self.tier_elements > 0 => {
                t.stored_bytes as f64 * 8.0 / self.tier_elements as f64
            }
            _ => 0.0,
        }
    }

    /// The figures as one JSON object: what the demo page shows and what the native
    /// reference prints (numbers in Rust's shortest round-trip form, so JavaScript parses
    /// them to the same doubles).
    ///
    /// Fields: `dtype` (name or null), `elements`, `raw_bytes`, `lossless_bytes`,
    /// `lossless_ratio`, `lossless_bits_per_value`, `tier_elements`, `tier_raw_bytes`,
    /// `non_finite`, `tiers` (per tier: `bits`, `stored_bytes`, `ratio`, `bits_per_value`,
    /// `max_abs_err`, `mean_abs_err`, `max_rel_err`, `mean_rel_err`), `exponent_hist`.
    pub fn to_json(&self) -> String {
        use std::fmt::Write;
        let num = |x: f64| {
            if x.is_finite() {
                format!("{x}")
            } else {
                "null".to_owned()
            }
        };
        let mut s = String::with_capacity(2048);
        let dtype = self
            .dtype
            .map_or_else(|| "null".to_owned(), |d| format!("\"{}\"", d.name()));
        // Writing to a String cannot fail.
        let _ = write!(
            s,
            "{{\"dtype\":{dtype},\"elements\":{},\"raw_bytes\":{},\"lossless_bytes\":{},\"lossless_ratio\":{},\"lossless_bits_per_value\":{},\"tier_elements\":{},\"tier_raw_bytes\":{},\"non_finite\":{},\"tiers\":[",
            self.elements,
            self.raw_bytes,
            self.lossless_bytes,
            num(self.lossless_ratio()),
            num(self.lossless_bits_per_value()),
            self.tier_elements,
            self.tier_raw_bytes,
            self.non_finite,
        );
        for (i, t) in self.tiers.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"bits\":{},\"stored_bytes\":{},\"ratio\":{},\"bits_per_value\":{},\"max_abs_err\":{},\"mean_abs_err\":{},\"max_rel_err\":{},\"mean_rel_err\":{}}}",
                if i == 0 { "" } else { "," },
                t.bits,
                t.stored_bytes,
                num(self.tier_ratio(i)),
                num(self.tier_bits_per_value(i)),
                num(t.max_abs_err),
                num(self.mean_abs_err(i)),
                num(t.max_rel_err),
                num(self.mean_rel_err(i)),
            );
        }
        s.push_str("],\"exponent_hist\":[");
        for (i, h) in self.exponent_hist.iter().enumerate() {
            let _ = write!(s, "{}{h}", if i == 0 { "" } else { "," });
        }
        s.push_str("]}");
        s
    }

    /// Stored bits per value of the lossless encoding.
    pub fn lossless_bits_per_value(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.lossless_bytes as f64 * 8.0 / self.elements as f64
        }
    }
}

fn ratio(raw: u64, stored: u64) -> f64 {
    if stored == 0 {
        0.0
    } else {
        raw as f64 / stored as f64
    }
}

/// Measures one tensor (little-endian bytes of `dtype`).
///
/// # Errors
/// [`WasmError::RaggedLength`], or a codec error (which would be a bug: every input the
/// length check lets through encodes).
pub fn analyze(dtype: DType, bytes: &[u8]) -> Result<Analysis, WasmError> {
    let size = dtype.size();
    if !bytes.len().is_multiple_of(size) {
        return Err(WasmError::RaggedLength {
            what: "tensor data",
            len: bytes.len(),
            dtype,
            size,
        });
    }
    let mut a = Analysis::empty();
    a.dtype = Some(dtype);
    a.elements = (bytes.len() / size) as u64;
    a.raw_bytes = bytes.len() as u64;
    let opts = strata_codec::lossless::LosslessOptions::default();
    for block in bytes.chunks(LOSSLESS_BLOCK_BYTES) {
        a.lossless_bytes += ops::encode(dtype, block, None, &opts)?.len() as u64;
    }
    if !dtype.is_float() {
        return Ok(a);
    }
    exponent_histogram(dtype, bytes, &mut a.exponent_hist);
    let values = ops::widen(dtype, bytes)?;
    if values.iter().any(|v| !v.is_finite()) {
        a.non_finite = 1;
        return Ok(a);
    }
    a.tier_elements = a.elements;
    a.tier_raw_bytes = a.raw_bytes;
    let block_values = LOSSLESS_BLOCK_BYTES / size;
    for t in &mut a.tiers {
        for block in values.chunks(block_values) {
            let seg = ops::quantize(block, t.bits, dtype, None)?;
            t.stored_bytes += seg.len() as u64;
            let back = ops::dequantize(&seg)?;
            measure(block, &back, t);
        }
    }
    Ok(a)
}

/// Adds the errors of `back` against `orig` to `t`.
fn measure(orig: &[f32], back: &[f32], t: &mut TierMeasure) {
    for (g, h) in orig.chunks(ERROR_GROUP).zip(back.chunks(ERROR_GROUP)) {
        let gmax = g.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs())));
        let mut emax = 0f64;
        let mut esum = 0f64;
        for (&x, &y) in g.iter().zip(h) {
            let e = (f64::from(x) - f64::from(y)).abs();
            esum += e;
            emax = emax.max(e);
        }
        t.sum_abs_err += esum;
        t.max_abs_err = t.max_abs_err.max(emax);
        if gmax > 0.0 {
            t.max_rel_err = t.max_rel_err.max(emax / gmax);
            t.sum_rel_err += esum / gmax;
        }
    }
}

fn exponent_histogram(dtype: DType, bytes: &[u8], hist: &mut [u64]) {
    let mut bump = |e: usize| {
        if let Some(h) = hist.get_mut(e) {
            *h += 1;
        }
    };
    match dtype {
        DType::BF16 => bytes
            .chunks_exact(2)
            .for_each(|c| bump(usize::from((u16::from_le_bytes([c[0], c[1]]) >> 7) & 0xFF))),
        DType::F16 => bytes
            .chunks_exact(2)
            .for_each(|c| bump(usize::from((u16::from_le_bytes([c[0], c[1]]) >> 10) & 0x1F))),
        DType::F32 => bytes.chunks_exact(4).for_each(|c| {
            bump(((u32::from_le_bytes([c[0], c[1], c[2], c[3]]) >> 23) & 0xFF) as usize)
        }),
        DType::F64 => bytes.chunks_exact(8).for_each(|c| {
            bump(usize::from(
                ((u16::from(c[7]) << 8 | u16::from(c[6])) >> 7) & 0xFF,
            ))
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_codec::quant::QuantBits;

    fn bf16(v: &[f32]) -> Vec<u8> {
        ops::narrow(DType::BF16, v).unwrap()
    }

    #[test]
    fn figures_of_a_small_tensor() {
        let v: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.1).sin() * 0.05).collect();
        let a = analyze(DType::BF16, &bf16(&v)).unwrap();
        assert_eq!(a.elements, 1000);
        assert_eq!(a.raw_bytes, 2000);
        assert!(a.lossless_bytes > 48 && a.lossless_bytes < 2100);
        assert_eq!(a.exponent_hist.iter().sum::<u64>(), 1000);
        for (i, t) in a.tiers.iter().enumerate() {
            let bound = QuantBits::from_bits(t.bits as u8)
                .unwrap()
                .relative_error_bound();
            assert!(
                t.max_rel_err > 0.0 && t.max_rel_err <= bound * 1.0001,
                "{t:?}"
            );
            assert!(a.mean_rel_err(i) < t.max_rel_err);
            assert!(t.max_abs_err <= 0.05 * bound * 1.01);
        }
        // Fewer bits, fewer bytes, more error.
        for w in a.tiers.windows(2) {
            assert!(w[0].stored_bytes > w[1].stored_bytes);
            assert!(w[0].sum_abs_err < w[1].sum_abs_err);
        }
        // 8-bit: 68 bytes per group of 64, 16 groups, one 48-byte header.
        assert_eq!(a.tiers[0].stored_bytes, 48 + 15 * 68 + (4 + 40));
        assert!(
            (a.tier_bits_per_value(0) - a.tiers[0].stored_bytes as f64 * 8.0 / 1000.0).abs()
                < 1e-12
        );
    }

    #[test]
    fn totals_merge() {
        let a = analyze(DType::F32, &ops::f32_bytes(&[1.0, -2.0, 0.5, 0.25])).unwrap();
        let b = analyze(DType::U8, &[1, 2, 3]).unwrap();
        let c = analyze(DType::F32, &ops::f32_bytes(&[f32::NAN, 1.0])).unwrap();
        assert_eq!(b.tier_elements, 0);
        assert_eq!(c.non_finite, 1);
        let mut t = Analysis::empty();
        t.merge(&a);
        assert_eq!(t.dtype, Some(DType::F32));
        t.merge(&b);
        t.merge(&c);
        assert_eq!(t.dtype, None);
        assert_eq!(t.elements, 9);
        assert_eq!(t.raw_bytes, 16 + 3 + 8);
        assert_eq!(
            t.lossless_bytes,
            a.lossless_bytes + b.lossless_bytes + c.lossless_bytes
        );
        assert_eq!(t.tier_elements, 4);
        assert_eq!(t.non_finite, 1);
        assert_eq!(t.tiers[3].stored_bytes, a.tiers[3].stored_bytes);
        assert_eq!(t.exponent_hist[127], 2); // 1.0 twice (a, c)
        assert!(analyze(DType::F32, &[0; 5]).is_err());
        let j: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_eq!(j["dtype"], serde_json::Value::Null);
        assert_eq!(j["elements"], 9);
        assert_eq!(j["tiers"][3]["bits"], 3);
        assert_eq!(
            j["tiers"][0]["max_rel_err"].as_f64().unwrap(),
            t.tiers[0].max_rel_err
        );
        assert_eq!(j["exponent_hist"].as_array().unwrap().len(), 256);
        let j: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(j["dtype"], "f32");
        assert_eq!(j["lossless_ratio"].as_f64().unwrap(), a.lossless_ratio());
    }

    #[test]
    fn exponent_bins() {
        let mut h = vec![0u64; 256];
        exponent_histogram(
            DType::F16,
            &half::f16::from_f32(1.0).to_bits().to_le_bytes(),
            &mut h,
        );
        assert_eq!(h[15], 1);
        exponent_histogram(DType::F64, &1.0f64.to_le_bytes(), &mut h);
        assert_eq!(h[1023 >> 3], 1);
        exponent_histogram(DType::BF16, &bf16(&[2.0]), &mut h);
        assert_eq!(h[128], 1);
    }
}
