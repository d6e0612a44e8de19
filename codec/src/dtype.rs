//! Element types and their on-disk codes.

use std::fmt;

/// The element type of a tensor.
///
/// Float types go through the byte-plane codec; integer and boolean types are stored as
/// raw bytes (still byte-planed and entropy coded, but never rotated). The numeric code of
/// each variant is part of the segment format and never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16: the top half of a binary32.
    BF16,
    /// IEEE 754 binary64.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// Boolean, one byte per element.
    Bool,
    /// 8-bit float, 4 exponent and 3 mantissa bits, finite only (OCP FP8 E4M3, PyTorch's
    /// `float8_e4m3fn`): bias 7, NaN is `S.1111.111`, no infinity.
    F8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits (OCP FP8 E5M2, `float8_e5m2`): IEEE-like,
    /// bias 15, with infinities and NaNs.
    F8E5M2,
    /// 8-bit scale: a biased exponent only (OCP MX E8M0, `float8_e8m0fnu`): `2^(e - 127)`,
    /// `0xFF` is NaN.
    F8E8M0,
    /// 8-bit float E4M3, "FNUZ" variant (`float8_e4m3fnuz`): bias 8, no negative zero, `0x80`
    /// is the only NaN, no infinity.
    F8E4M3Fnuz,
    /// 8-bit float E5M2, "FNUZ" variant (`float8_e5m2fnuz`): bias 16, no negative zero, `0x80`
    /// is the only NaN, no infinity.
    F8E5M2Fnuz,
    /// Complex of two binary32 (real, then imaginary), 8 bytes per element.
    C64,
    /// Two 4-bit floats E2M1 (OCP MX FP4: bias 1, no infinity or NaN) packed in one byte,
    /// the first in the low nibble: PyTorch's `float4_e2m1fn_x2`. One element of this dtype
    /// is the byte, so a shape counts pairs along its last dimension; safetensors' `F4`
    /// counts values, and import and export convert between the two (see
    /// [`DType::values_per_element`]).
    F4E2M1x2,
    /// Four 6-bit floats E2M3 (OCP MX FP6: bias 1, no infinity or NaN) packed in three bytes,
    /// value `i` in bits `6i..6i + 6` of the little-endian 24-bit word. One element of this
    /// dtype is the 3-byte group; safetensors' `F6_E2M3` counts values.
    F6E2M3x4,
    /// Four 6-bit floats E3M2 (OCP MX FP6: bias 3, no infinity or NaN) packed like
    /// [`DType::F6E2M3x4`]; safetensors' `F6_E3M2`.
    F6E3M2x4,
}

impl DType {
    /// Every dtype, in code order.
    pub const ALL: [DType; 22] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::Bool,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::F8E8M0,
        DType::F8E4M3Fnuz,
        DType::F8E5M2Fnuz,
        DType::C64,
        DType::F4E2M1x2,
        DType::F6E2M3x4,
        DType::F6E3M2x4,
    ];

    /// Bytes per element (per packed group for [`DType::F4E2M1x2`] and the F6 groups).
    pub const fn size(self) -> usize {
        match self {
            DType::I8
            | DType::F4E2M1x2
            | DType::U8
            | DType::Bool
            | DType::F8E4M3
            | DType::F8E5M2
            | DType::F8E8M0
            | DType::F8E4M3Fnuz
            | DType::F8E5M2Fnuz => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F6E2M3x4 | DType::F6E3M2x4 => 3,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
        }
    }

    /// Values one element holds: 2 for [`DType::F4E2M1x2`], 4 for the F6 groups, 1 for
    /// every other dtype. A safetensors tensor of a sub-byte dtype has this many times the
    /// last dimension of the Strata tensor that holds it.
    pub const fn values_per_element(self) -> usize {
        match self {
            DType::F4E2M1x2 => 2,
            DType::F6E2M3x4 | DType::F6E3M2x4 => 4,
            _ => 1,
        }
    }

    /// Bytes per byte plane of the lossless codec: the element size, but 1 for the packed
    /// sub-byte groups, whose fields do not line up with bytes and are coded as raw bytes.
    pub const fn plane_width(self) -> usize {
        match self {
            DType::F6E2M3x4 | DType::F6E3M2x4 => 1,
            d => d.size(),
        }
    }

    /// Whether this is a floating-point type the quantized tiers and the float paths of the
    /// codec handle (F32, F16, BF16, F64). The 8-bit floats and complex are not: they are
    /// stored losslessly as bytes, like integers.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// The stable one-byte code used in the segment header.
    pub const fn code(self) -> u8 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            DType::F64 => 3,
            DType::I8 => 4,
            DType::U8 => 5,
            DType::I16 => 6,
            DType::U16 => 7,
            DType::I32 => 8,
            DType::U32 => 9,
            DType::I64 => 10,
            DType::U64 => 11,
            DType::Bool => 12,
            DType::F8E4M3 => 13,
            DType::F8E5M2 => 14,
            DType::F8E8M0 => 15,
            DType::F8E4M3Fnuz => 16,
            DType::F8E5M2Fnuz => 17,
            DType::C64 => 18,
            DType::F4E2M1x2 => 19,
            DType::F6E2M3x4 => 20,
            DType::F6E3M2x4 => 21,
        }
    }

    /// The dtype of a header code, or `None` for an unknown code.
    pub fn from_code(code: u8) -> Option<DType> {
        DType::ALL.get(usize::from(code)).copied()
    }

    /// The dtype's name in the safetensors format (`"F32"`, `"BF16"`, `"BOOL"`, ...).
    pub const fn safetensors_name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::F64 => "F64",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::I64 => "I64",
            DType::U64 => "U64",
            DType::Bool => "BOOL",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E5M2 => "F8_E5M2",
            DType::F8E8M0 => "F8_E8M0",
            DType::F8E4M3Fnuz => "F8_E4M3FNUZ",
            DType::F8E5M2Fnuz => "F8_E5M2FNUZ",
            DType::C64 => "C64",
            DType::F4E2M1x2 => "F4",
            DType::F6E2M3x4 => "F6_E2M3",
            DType::F6E3M2x4 => "F6_E3M2",
        }
    }

    /// The dtype of a safetensors dtype name, or `None` for an unknown name. The
    /// `safetensors` crate's `Dtype` prints these names with `{:?}`.
    pub fn from_safetensors_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.safetensors_name() == name)
    }

    /// The lower-case name used by the CLI and in safetensors-like listings.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::F8E4M3 => "f8_e4m3",
            DType::F8E5M2 => "f8_e5m2",
            DType::F8E8M0 => "f8_e8m0",
            DType::F8E4M3Fnuz => "f8_e4m3fnuz",
            DType::F8E5M2Fnuz => "f8_e5m2fnuz",
            DType::C64 => "c64",
            DType::F4E2M1x2 => "f4_e2m1_x2",
            DType::F6E2M3x4 => "f6_e2m3_x4",
            DType::F6E3M2x4 => "f6_e3m2_x4",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(usize::from(d.code()), i);
            assert_eq!(DType::from_code(d.code()), Some(*d));
        }
        assert_eq!(DType::from_code(22), None);
        assert_eq!(DType::from_code(255), None);
    }

    #[test]
    fn safetensors_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_safetensors_name(d.safetensors_name()), Some(d));
        }
        assert_eq!(DType::from_safetensors_name("F8_E4M3"), Some(DType::F8E4M3));
        assert_eq!(DType::from_safetensors_name("F4"), Some(DType::F4E2M1x2));
        assert_eq!(DType::from_safetensors_name("F2"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::BF16.size(), 2);
        assert_eq!(DType::F64.size(), 8);
        assert!(DType::F16.is_float());
        assert!(!DType::I32.is_float());
        assert_eq!(DType::F6E3M2x4.size(), 3);
        assert_eq!(DType::F6E3M2x4.values_per_element(), 4);
        assert_eq!(DType::F6E3M2x4.plane_width(), 1);
        assert_eq!(DType::F4E2M1x2.values_per_element(), 2);
        assert!(!DType::F4E2M1x2.is_float());
    }
}
