//! The JavaScript API: thin wasm-bindgen wrappers over [`crate::ops`], [`crate::analyze`]
//! and [`crate::store`]. Each returns `Result<_, JsError>`, which wasm-bindgen turns into
//! a thrown `Error` carrying the [`WasmError`] message.
//!
//! Numbers JavaScript passes as `number` (steps, times, byte caps) must be non-negative
//! integers up to 2^53; they are checked here. Byte counts come back as `number`.
//!
//! These functions call into the JavaScript host, so they only work in WebAssembly; native
//! code calls the modules above directly.

use strata_codec::segment::Encoding;
use strata_codec::{convert, DType};
use strata_tiering::{Budget, Tier};
use wasm_bindgen::prelude::*;

use crate::analyze::{self, Analysis};
use crate::error::{invalid, WasmError};
use crate::ops;
use crate::store::{self, StoreOptions, WritePolicy};

/// Largest integer a JavaScript `number` holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A JavaScript number as a `u64`, refusing fractions, negatives, NaN and values past 2^53.
pub fn js_u64(what: &'static str, x: f64) -> Result<u64, WasmError> {
    if (0.0..=MAX_SAFE).contains(&x) && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(invalid(
            what,
            format!("{x}: must be an integer in 0..=2^53-1"),
        ))
    }
}

/// A JavaScript number as a `u32`, refusing fractions, negatives, NaN and values past
/// `u32::MAX` (wasm-bindgen's own `u32` conversion would wrap them silently).
pub fn js_u32(what: &'static str, x: f64) -> Result<u32, WasmError> {
    if (0.0..=f64::from(u32::MAX)).contains(&x) && x.fract() == 0.0 {
        Ok(x as u32)
    } else {
        Err(invalid(
            what,
            format!("{x}: must be an integer in 0..=2^32-1"),
        ))
    }
}

fn encode_with(
    dtype: DType,
    data: &[u8],
    base: Option<&[u8]>,
    mode: Option<String>,
) -> Result<Vec<u8>, JsError> {
    let opts = ops::lossless_options(mode.as_deref())?;
    Ok(ops::encode(dtype, data, base, &opts)?)
}

/// Encodes typed values losslessly as `dtype`: their little-endian bytes (`bytes` of the
/// values and of `base`), a keyframe or an XOR delta against `base`. The one body of the
/// typed `encode*` functions below.
fn encode_typed<T>(
    dtype: DType,
    values: &[T],
    base: Option<Vec<T>>,
    mode: Option<String>,
    bytes: fn(&[T]) -> Vec<u8>,
) -> Result<Vec<u8>, JsError> {
    let base = base.map(|b| bytes(&b));
    encode_with(dtype, &bytes(values), base.as_deref(), mode)
}

/// Encodes f32 values losslessly: a keyframe, or an XOR delta against `base`.
/// `mode` is `"default"`, `"fast"` or `"max-ratio"`.
#[wasm_bindgen(js_name = encodeF32)]
pub fn encode_f32(
    values: &[f32],
    base: Option<Vec<f32>>,
    mode: Option<String>,
) -> Result<Vec<u8>, JsError> {
    encode_typed(DType::F32, values, base, mode, ops::f32_bytes)
}

/// Encodes bf16 bit patterns (a `Uint16Array`) losslessly, optionally against `base`.
#[wasm_bindgen(js_name = encodeBf16)]
pub fn encode_bf16(
    words: &[u16],
    base: Option<Vec<u16>>,
    mode: Option<String>,
) -> Result<Vec<u8>, JsError> {
    encode_typed(DType::BF16, words, base, mode, ops::u16_bytes)
}

/// Encodes f16 bit patterns (a `Uint16Array`) losslessly, optionally against `base`.
#[wasm_bindgen(js_name = encodeF16)]
pub fn encode_f16(
    words: &[u16],
    base: Option<Vec<u16>>,
    mode: Option<String>,
) -> Result<Vec<u8>, JsError> {
    encode_typed(DType::F16, words, base, mode, ops::u16_bytes)
}

/// Encodes little-endian bytes of any dtype (`"bf16"`, `"F32"`, `"i8"`, ...) losslessly.
#[wasm_bindgen(js_name = encodeBytes)]
pub fn encode_bytes(
    dtype: &str,
    bytes: &[u8],
    base: Option<Vec<u8>>,
    mode: Option<String>,
) -> Result<Vec<u8>, JsError> {
    encode_with(ops::parse_dtype(dtype)?, bytes, base.as_deref(), mode)
}

/// Decodes a lossless segment to its bytes; a delta needs its base's bytes.
#[wasm_bindgen(js_name = decodeBytes)]
pub fn decode_bytes(segment: &[u8], base: Option<Vec<u8>>) -> Result<Vec<u8>, JsError> {
    Ok(ops::decode(segment, base.as_deref())?.1)
}

/// Decodes a lossless f32 segment to a `Float32Array`.
#[wasm_bindgen(js_name = decodeF32)]
pub fn decode_f32(segment: &[u8], base: Option<Vec<f32>>) -> Result<Vec<f32>, JsError> {
    let b = base.map(|b| ops::f32_bytes(&b));
    let (dtype, bytes) = ops::decode(segment, b.as_deref())?;
    if dtype != DType::F32 {
        return Err(invalid(
            "segment",
            format!("holds {dtype}, not f32: use decodeBytes"),
        )
        .into());
    }
    Ok(ops::f32_from_bytes(&bytes))
}

/// Decodes a lossless segment of a 2-byte dtype (bf16, f16, i16, u16) to a `Uint16Array`.
#[wasm_bindgen(js_name = decodeU16)]
pub fn decode_u16(segment: &[u8], base: Option<Vec<u16>>) -> Result<Vec<u16>, JsError> {
    let b = base.map(|b| ops::u16_bytes(&b));
    let (dtype, bytes) = ops::decode(segment, b.as_deref())?;
    if dtype.size() != 2 {
        return Err(invalid("segment", format!("holds {dtype}, not a 2-byte dtype")).into());
    }
    Ok(ops::u16_from_bytes(&bytes))
}

/// Quantizes f32 values at `bits` (8, 7, 5, 3) into a segment; `dtype` (default `"f32"`)
/// records the source type, `groupSize` defaults to 64.
#[wasm_bindgen]
pub fn quantize(
    values: &[f32],
    bits: f64,
    dtype: Option<String>,
    #[wasm_bindgen(js_name = groupSize)] group_size: Option<f64>,
) -> Result<Vec<u8>, JsError> {
    let dtype = ops::parse_dtype(dtype.as_deref().unwrap_or("f32"))?;
    let group_size = group_size.map(|g| js_u32("groupSize", g)).transpose()?;
    Ok(ops::quantize(
        values,
        js_u32("bits", bits)?,
        dtype,
        group_size,
    )?)
}

/// Dequantizes a quantized segment to a `Float32Array`.
#[wasm_bindgen]
pub fn dequantize(segment: &[u8]) -> Result<Vec<f32>, JsError> {
    Ok(ops::dequantize(segment)?)
}

/// Packs signed codes (an `Int8Array`) at `bits` (1..=8) bits each.
#[wasm_bindgen]
pub fn pack(codes: &[i8], bits: f64) -> Result<Vec<u8>, JsError> {
    Ok(ops::pack(codes, js_u32("bits", bits)?)?)
}

/// Unpacks `count` codes of `bits` bits into an `Int8Array`.
#[wasm_bindgen]
pub fn unpack(packed: &[u8], bits: f64, count: f64) -> Result<Vec<i8>, JsError> {
    let count = usize::try_from(js_u64("count", count)?)
        .map_err(|_| invalid("count", format!("{count}: more codes than memory holds")))?;
    Ok(ops::unpack(packed, js_u32("bits", bits)?, count)?)
}

/// Byte-wise XOR of two equally long buffers (the lossless codec's delta).
#[wasm_bindgen(js_name = xorBytes)]
pub fn xor_bytes(a: &[u8], b: &[u8]) -> Result<Vec<u8>, JsError> {
    Ok(ops::xor(a, b)?)
}

/// bf16 bit patterns widened to f32 (exact, bit for bit: [`convert::to_f32`]).
#[wasm_bindgen(js_name = bf16ToF32)]
pub fn bf16_to_f32(words: &[u16]) -> Vec<f32> {
    // A float dtype and whole words: the conversion cannot fail.
    convert::to_f32(DType::BF16, &ops::u16_bytes(words)).unwrap_or_default()
}

/// f16 bit patterns widened to f32 (exact: [`convert::to_f32`]).
#[wasm_bindgen(js_name = f16ToF32)]
pub fn f16_to_f32(words: &[u16]) -> Vec<f32> {
    // A float dtype and whole words: the conversion cannot fail.
    convert::to_f32(DType::F16, &ops::u16_bytes(words)).unwrap_or_default()
}

/// f32 values rounded to bf16 bit patterns (nearest even; NaN stays NaN:
/// [`convert::from_f32`]).
#[wasm_bindgen(js_name = f32ToBf16)]
pub fn f32_to_bf16(values: &[f32]) -> Vec<u16> {
    // A float dtype: the conversion cannot fail.
    ops::u16_from_bytes(&convert::from_f32(DType::BF16, values).unwrap_or_default())
}

/// A segment's validated header.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    encoding: String,
    dtype: String,
    bits: u32,
    elements: f64,
    group_size: u32,
    payload_bytes: f64,
    segment_bytes: f64,
}

#[wasm_bindgen]
impl SegmentInfo {
    /// `"keyframe"`, `"delta"`, `"quantized"` or `"two-level3"`.
    #[wasm_bindgen(getter)]
    pub fn encoding(&self) -> String {
        self.encoding.clone()
    }
    /// The dtype's name (`"bf16"`, ...).
    #[wasm_bindgen(getter)]
    pub fn dtype(&self) -> String {
        self.dtype.clone()
    }
    /// Bits per code (0 for lossless).
    #[wasm_bindgen(getter)]
    pub fn bits(&self) -> u32 {
        self.bits
    }
    /// Element count.
    #[wasm_bindgen(getter)]
    pub fn elements(&self) -> f64 {
        self.elements
    }
    /// Values per quantization group (0 for lossless).
    #[wasm_bindgen(getter, js_name = groupSize)]
    pub fn group_size(&self) -> u32 {
        self.group_size
    }
    /// Payload bytes.
    #[wasm_bindgen(getter, js_name = payloadBytes)]
    pub fn payload_bytes(&self) -> f64 {
        self.payload_bytes
    }
    /// Bytes of the whole segment.
    #[wasm_bindgen(getter, js_name = segmentBytes)]
    pub fn segment_bytes(&self) -> f64 {
        self.segment_bytes
    }
}

/// Parses a segment (checksum included) and returns its header.
#[wasm_bindgen(js_name = segmentInfo)]
pub fn segment_info(segment: &[u8]) -> Result<SegmentInfo, JsError> {
    let h = ops::segment_header(segment)?;
    let (encoding, bits) = match h.encoding {
        Encoding::Keyframe => ("keyframe", 0),
        Encoding::Delta => ("delta", 0),
        Encoding::Quantized(b) => ("quantized", u32::from(b.bits())),
        Encoding::TwoLevel3 => ("two-level3", 3),
        Encoding::QuantizedFrames(b) => ("frames", u32::from(b.bits())),
    };
    Ok(SegmentInfo {
        encoding: encoding.to_owned(),
        dtype: h.dtype.name().to_owned(),
        bits,
        elements: h.elements as f64,
        group_size: h.group_size,
        payload_bytes: h.payload_len as f64,
        segment_bytes: segment.len() as f64,
    })
}

/// What each tier costs and loses on one tensor, or a total ([`crate::analyze`]).
#[wasm_bindgen(js_name = Analysis)]
#[derive(Debug, Clone)]
pub struct JsAnalysis(Analysis);

#[wasm_bindgen(js_class = Analysis)]
impl JsAnalysis {
    /// An empty total to [`JsAnalysis::merge`] tensors into.
    #[wasm_bindgen(constructor)]
    pub fn new() -> JsAnalysis {
        JsAnalysis(Analysis::empty())
    }

    /// Adds another analysis to this total.
    pub fn merge(&mut self, other: &JsAnalysis) {
        self.0.merge(&other.0);
    }

    /// The figures as a JSON string (see [`Analysis::to_json`]).
    #[wasm_bindgen(js_name = toJson)]
    pub fn to_json(&self) -> String {
        self.0.to_json()
    }
}

impl Default for JsAnalysis {
    fn default() -> Self {
        Self::new()
    }
}

/// Measures one tensor given as little-endian bytes of `dtype`.
#[wasm_bindgen(js_name = analyzeTensor)]
pub fn analyze_tensor(dtype: &str, bytes: &[u8]) -> Result<JsAnalysis, JsError> {
    Ok(JsAnalysis(analyze::analyze(
        ops::parse_dtype(dtype)?,
        bytes,
    )?))
}

/// Tier names in the order of [`TieredStore::bytes_by_tier`] and
/// [`TieredStore::version_tiers`]: absent, cold3, warm5, warm7, hot8, exact.
#[wasm_bindgen(js_name = tierNames)]
pub fn tier_names() -> Vec<String> {
    Tier::ALL.iter().map(|t| t.name().to_owned()).collect()
}

/// What a maintenance pass did: the JavaScript face of [`strata_tiering::MaintainReport`],
/// built `From` it. wasm-bindgen exports only types defined in this crate, not one of
/// another crate, hence this mirror. Counts are capped at `u32::MAX`, bytes are `number`s
/// (exact up to 2^53). The on-disk store's `converted` and `stats_saved` are always 0 here
/// and left out.
#[wasm_bindgen]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaintainReport {
    /// Blocks moved.
    pub moves: u32,
    /// Promotions by score.
    pub promoted: u32,
    /// Demotions by score.
    pub demoted: u32,
    /// 7 -> 5 bits over `warm_byte_cap`.
    pub squeezed: u32,
    /// Warm -> cold over `warm_byte_cap`.
    pub evicted: u32,
    /// 5 -> 7 bits below the low watermark.
    pub restored: u32,
    /// Cold -> Tier 0.
    pub absent: u32,
    /// Moves left for a later pass.
    pub deferred: u32,
    /// Bytes of the re-encoded segments.
    #[wasm_bindgen(js_name = bytesReencoded)]
    pub bytes_reencoded: f64,
    /// Warm bytes (the figure `warm_byte_cap` limits) before the pass.
    #[wasm_bindgen(js_name = warmBytesBefore)]
    pub warm_bytes_before: f64,
    /// Warm bytes after the pass.
    #[wasm_bindgen(js_name = warmBytesAfter)]
    pub warm_bytes_after: f64,
}

impl From<strata_tiering::MaintainReport> for MaintainReport {
    fn from(r: strata_tiering::MaintainReport) -> Self {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        MaintainReport {
            moves: count(r.moves),
            promoted: count(r.promoted),
            demoted: count(r.demoted),
            squeezed: count(r.squeezed),
            evicted: count(r.evicted),
            restored: count(r.restored),
            absent: count(r.absent),
            deferred: r.deferred,
            bytes_reencoded: r.bytes_written as f64,
            warm_bytes_before: r.warm_bytes_before as f64,
            warm_bytes_after: r.warm_bytes_after as f64,
        }
    }
}

/// An in-memory tiered store ([`crate::store::TieredStore`]). Times are milliseconds on
/// any epoch; steps are integers.
#[wasm_bindgen]
#[derive(Debug)]
pub struct TieredStore(store::TieredStore);

#[wasm_bindgen]
impl TieredStore {
    /// A store whose warm tier may hold `warmByteCap` bytes, with `blockValues` values per
    /// block (default 4096); `allowZeroFill` lets idle cold blocks go to Tier 0 (read as
    /// zeros). Other settings are the defaults of ADR 0005.
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(js_name = warmByteCap)] warm_byte_cap: f64,
        #[wasm_bindgen(js_name = blockValues)] block_values: Option<f64>,
        #[wasm_bindgen(js_name = allowZeroFill)] allow_zero_fill: Option<bool>,
    ) -> Result<TieredStore, JsError> {
        let mut opts = StoreOptions::default();
        opts.tiers.warm_byte_cap = js_u64("warmByteCap", warm_byte_cap)?;
        opts.tiers.allow_zero_fill = allow_zero_fill.unwrap_or(false);
        if let Some(b) = block_values {
            opts.block_values = js_u32("blockValues", b)?;
        }
        Ok(TieredStore(store::TieredStore::new(opts)?))
    }

    /// Writes a version from little-endian bytes of `dtype`; `policy` is `"exact"` or a
    /// start tier (`"hot8"`, `"warm7"`, `"warm5"`, `"cold3"`).
    pub fn put(
        &mut self,
        name: &str,
        step: f64,
        dtype: &str,
        bytes: &[u8],
        policy: &str,
        now: f64,
    ) -> Result<(), JsError> {
        let dtype = ops::parse_dtype(dtype)?;
        let policy = WritePolicy::parse(policy)?;
        self.0.put(
            name,
            js_u64("step", step)?,
            dtype,
            bytes,
            policy,
            js_u64("now", now)?,
        )?;
        Ok(())
    }

    /// Reads a version as bytes of its dtype (bit-exact for exact versions) and counts the
    /// read at `now`.
    pub fn get(&mut self, name: &str, step: f64, now: f64) -> Result<Vec<u8>, JsError> {
        let (_, bytes) = self
            .0
            .get(name, js_u64("step", step)?, js_u64("now", now)?)?;
        Ok(bytes)
    }

    /// Reads a float version as a `Float32Array` and counts the read at `now`.
    #[wasm_bindgen(js_name = getF32)]
    pub fn get_f32(&mut self, name: &str, step: f64, now: f64) -> Result<Vec<f32>, JsError> {
        Ok(self
            .0
            .get_f32(name, js_u64("step", step)?, js_u64("now", now)?)?)
    }

    /// Counts a read of a version at `now` without decoding it.
    #[wasm_bindgen(js_name = recordAccess)]
    pub fn record_access(&mut self, name: &str, step: f64, now: f64) -> Result<(), JsError> {
        self.0
            .record_access(name, js_u64("step", step)?, js_u64("now", now)?)?;
        Ok(())
    }

    /// One maintenance pass at `now`, within `maxOps` moves and `maxBytes` re-encoded bytes
    /// (both unlimited by default).
    pub fn maintain(
        &mut self,
        now: f64,
        #[wasm_bindgen(js_name = maxOps)] max_ops: Option<f64>,
        #[wasm_bindgen(js_name = maxBytes)] max_bytes: Option<f64>,
    ) -> Result<MaintainReport, JsError> {
        let budget = Budget::new(
            match max_bytes {
                Some(b) => js_u64("maxBytes", b)?,
                None => u64::MAX,
            },
            match max_ops {
                Some(n) => js_u32("maxOps", n)?,
                None => u32::MAX,
            },
        );
        Ok(self.0.maintain(js_u64("now", now)?, budget)?.into())
    }

    /// Sets `warm_byte_cap` for the next passes.
    #[wasm_bindgen(js_name = setWarmByteCap)]
    pub fn set_warm_byte_cap(&mut self, cap: f64) -> Result<(), JsError> {
        self.0.set_warm_byte_cap(js_u64("cap", cap)?)?;
        Ok(())
    }

    /// The current `warm_byte_cap`.
    #[wasm_bindgen(getter, js_name = warmByteCap)]
    pub fn warm_byte_cap(&self) -> f64 {
        self.0.options().tiers.warm_byte_cap as f64
    }

    /// Bytes of the segments held per tier, in [`tier_names`] order.
    #[wasm_bindgen(js_name = bytesByTier)]
    pub fn bytes_by_tier(&self) -> Vec<f64> {
        self.0.bytes_by_tier().iter().map(|&b| b as f64).collect()
    }

    /// Warm bytes as the policy counts them (the figure `warm_byte_cap` limits).
    #[wasm_bindgen(js_name = warmBytes)]
    pub fn warm_bytes(&self) -> f64 {
        self.0.model_bytes().warm() as f64
    }

    /// Blocks of a version per tier, in [`tier_names`] order.
    #[wasm_bindgen(js_name = versionTiers)]
    pub fn version_tiers(&self, name: &str, step: f64) -> Result<Vec<u32>, JsError> {
        Ok(self.0.version_tiers(name, js_u64("step", step)?)?.to_vec())
    }

    /// Worst-case error of a version relative to its groups' maxima (0 exact, Infinity for
    /// Tier 0 blocks).
    #[wasm_bindgen(js_name = errorBound)]
    pub fn error_bound(&self, name: &str, step: f64) -> Result<f64, JsError> {
        Ok(self.0.error_bound(name, js_u64("step", step)?)?)
    }

    /// Steps of a tensor's versions, ascending.
    pub fn steps(&self, name: &str) -> Vec<f64> {
        self.0.steps(name).into_iter().map(|s| s as f64).collect()
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.0.names()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_mirror_keeps_every_figure() {
        let r = strata_tiering::MaintainReport {
            moves: 9,
            promoted: 1,
            demoted: 2,
            squeezed: 1,
            evicted: 1,
            restored: 1,
            absent: 3,
            bytes_written: 1 << 40,
            warm_bytes_before: 7,
            warm_bytes_after: 5,
            deferred: 4,
            converted: 0,
            stats_saved: 0,
        };
        let js = MaintainReport::from(r);
        assert_eq!(
            (js.moves, js.promoted, js.demoted, js.squeezed),
            (9, 1, 2, 1)
        );
        assert_eq!(
            (js.evicted, js.restored, js.absent, js.deferred),
            (1, 1, 3, 4)
        );
        assert_eq!(js.bytes_reencoded, (1u64 << 40) as f64);
        assert_eq!((js.warm_bytes_before, js.warm_bytes_after), (7.0, 5.0));
        let big = strata_tiering::MaintainReport {
            moves: usize::MAX,
            ..r
        };
        assert_eq!(MaintainReport::from(big).moves, u32::MAX);
    }
}
