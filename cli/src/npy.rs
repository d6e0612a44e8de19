//! NumPy `.npy` output for one tensor (format version 1.0), and a parser for its header.
//!
//! The file is the magic `\x93NUMPY`, version `1 0`, a little-endian u16 header length, then
//! an ASCII dict `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` padded with
//! spaces and ended by `\n` so the data starts at a multiple of 64 bytes, then the element
//! bytes (row-major, little-endian, as the store holds them).
//!
//! bfloat16 has no NumPy dtype: a bf16 tensor is written as `'<u2'`, its raw bit patterns
//! (`(np.load(f).astype(np.uint32) << 16).view(np.float32)` turns them into f32).
//!
//! The sub-byte floats are their packed bytes: FP4 pairs as `'|u1'`, FP6 groups of four
//! values as 3-byte voids (`'|V3'`); the shape counts pairs or groups in its last dimension.
//!
//! The tool only writes `.npy` files; the header parser is built for tests (see `parser`).

use std::borrow::Cow;

use strata_store::DType;

/// The `.npy` magic.
pub(crate) const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Data starts at a multiple of this.
const ALIGN: usize = 64;

/// The NumPy `descr` of a dtype. bf16 is `'<u2'` (raw bits; see the module docs); a dtype
/// NumPy has no name for is written as opaque bytes (`'|V<size>'`).
pub(crate) fn npy_descr(dtype: DType) -> Cow<'static, str> {
    Cow::Borrowed(match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // NumPy has no 8-bit floats: their bits, as bf16's are (ml_dtypes' types view them).
        DType::F8E4M3 | DType::F8E5M2 | DType::F8E8M0 | DType::F8E4M3Fnuz | DType::F8E5M2Fnuz => {
            "|u1"
        }
        DType::C64 => "<c8",
        // Two FP4 values per byte, as the store holds them (torch's float4_e2m1fn_x2);
        // the FP6 groups are 3-byte voids.
        DType::F4E2M1x2 => "|u1",
        other => return Cow::Owned(format!("|V{}", other.size())),
    })
}

/// The whole header (magic to `\n`) of a `.npy` file for `dtype` and `shape`: version 1.0,
/// or 2.0 (u32 length) in the unlikely case the dict does not fit a u16.
pub(crate) fn npy_header(dtype: DType, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        npy_descr(dtype)
    );
    let padded = |prefix: usize| (prefix + dict.len() + 1).div_ceil(ALIGN) * ALIGN;
    let (major, prefix) = if padded(10) - 10 <= usize::from(u16::MAX) {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let total = padded(prefix);
    let header_len = total - prefix;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(NPY_MAGIC);
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

#[cfg(test)]
pub(crate) use parser::{parse_npy_header, NpyError};

/// The header parser: the tool never reads `.npy` files, so it is built for tests only, where
/// it checks the writer (the unit tests below, and `tests/cli.rs`, which includes this file).
#[cfg(test)]
mod parser {
    use super::NPY_MAGIC;

    /// Longest header [`parse_npy_header`] accepts.
    const MAX_HEADER: usize = 1 << 20;

    /// A parsed `.npy` header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct NpyHeader {
        /// Format major version (1, 2 or 3).
        pub(crate) major: u8,
        /// The `descr` string, e.g. `<f4`.
        pub(crate) descr: String,
        /// `fortran_order`.
        pub(crate) fortran_order: bool,
        /// `shape`.
        pub(crate) shape: Vec<u64>,
        /// Offset of the first data byte.
        pub(crate) data_offset: usize,
    }

    /// Why a `.npy` header was refused.
    #[derive(Debug, thiserror::Error, PartialEq, Eq)]
    pub(crate) enum NpyError {
        /// The file is shorter than its header says.
        #[error("npy header truncated: need {need} bytes, have {have}")]
        Truncated {
            /// Bytes needed.
            need: usize,
            /// Bytes present.
            have: usize,
        },
        /// No `\x93NUMPY` magic.
        #[error("not an npy file (no \\x93NUMPY magic)")]
        BadMagic,
        /// A format version this parser does not read.
        #[error("npy format version {0} is not supported")]
        Version(u8),
        /// A header longer than 1 MiB.
        #[error("npy header of {0} bytes is too long")]
        TooLong(usize),
        /// The header dict is malformed.
        #[error("npy header dict: {0}")]
        Dict(&'static str),
    }

    /// Parses the header of a `.npy` file (the dict as NumPy and [`npy_header`] write it).
    ///
    /// # Errors
    /// [`NpyError`] saying what is wrong; never panics.
    pub(crate) fn parse_npy_header(bytes: &[u8]) -> std::result::Result<NpyHeader, NpyError> {
        let need = |n: usize| {
            if bytes.len() < n {
                Err(NpyError::Truncated {
                    need: n,
                    have: bytes.len(),
                })
            } else {
                Ok(())
            }
        };
        need(10)?;
        if &bytes[..6] != NPY_MAGIC {
            return Err(NpyError::BadMagic);
        }
        let major = bytes[6];
        let (len, prefix) = match major {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 => {
                need(12)?;
                let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
                (usize::try_from(len).unwrap_or(usize::MAX), 12)
            }
            v => return Err(NpyError::Version(v)),
        };
        if len > MAX_HEADER {
            return Err(NpyError::TooLong(len));
        }
        need(prefix + len)?;
        let dict = std::str::from_utf8(&bytes[prefix..prefix + len])
            .map_err(|_| NpyError::Dict("not UTF-8"))?
            .trim_end();
        let dict = dict
            .strip_prefix('{')
            .and_then(|d| d.strip_suffix('}'))
            .ok_or(NpyError::Dict("not a {...} dict"))?;
        let descr = quoted_value(dict, "descr")?.ok_or(NpyError::Dict("no 'descr'"))?;
        let fortran_order = match raw_value(dict, "fortran_order")? {
            Some(v) if v.starts_with("True") => true,
            Some(v) if v.starts_with("False") => false,
            _ => return Err(NpyError::Dict("no boolean 'fortran_order'")),
        };
        let shape_text = raw_value(dict, "shape")?.ok_or(NpyError::Dict("no 'shape'"))?;
        let inner = shape_text
            .strip_prefix('(')
            .and_then(|s| s.split(')').next())
            .ok_or(NpyError::Dict("'shape' is not a tuple"))?;
        let shape = inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>())
            .collect::<std::result::Result<Vec<u64>, _>>()
            .map_err(|_| NpyError::Dict("'shape' has a dimension that is not an integer"))?;
        Ok(NpyHeader {
            major,
            descr: descr.to_string(),
            fortran_order,
            shape,
            data_offset: prefix + len,
        })
    }

    /// The text after `'key':` (trimmed at the start), if the key is present.
    fn raw_value<'a>(dict: &'a str, key: &str) -> std::result::Result<Option<&'a str>, NpyError> {
        let pat = format!("'{key}'");
        let Some(at) = dict.find(&pat) else {
            return Ok(None);
        };
        let rest = dict[at + pat.len()..].trim_start();
        let rest = rest
            .strip_prefix(':')
            .ok_or(NpyError::Dict("a key without ':'"))?;
        Ok(Some(rest.trim_start()))
    }

    /// The quoted string value of `key`.
    fn quoted_value<'a>(
        dict: &'a str,
        key: &str,
    ) -> std::result::Result<Option<&'a str>, NpyError> {
        let Some(v) = raw_value(dict, key)? else {
            return Ok(None);
        };
        let q = v.chars().next().ok_or(NpyError::Dict("empty value"))?;
        if q != '\'' && q != '"' {
            return Err(NpyError::Dict("a string value is not quoted"));
        }
        let body = &v[1..];
        let end = body.find(q).ok_or(NpyError::Dict("unterminated string"))?;
        Ok(Some(&body[..end]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_is_aligned() {
        for dtype in DType::ALL {
            for shape in [vec![], vec![7], vec![2, 3], vec![1, 2, 3, 4, 5]] {
                let h = npy_header(dtype, &shape);
                assert_eq!(h.len() % 64, 0);
                assert_eq!(*h.last().unwrap(), b'\n');
                let p = parse_npy_header(&h).unwrap();
                assert_eq!(p.major, 1);
                assert_eq!(p.descr, npy_descr(dtype));
                assert!(!p.fortran_order);
                assert_eq!(p.shape, shape);
                assert_eq!(p.data_offset, h.len());
            }
        }
    }

    #[test]
    fn parses_numpy_written_header() {
        let dict = b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
        let mut h = b"\x93NUMPY\x01\x00".to_vec();
        let len = 118usize;
        h.extend_from_slice(&(len as u16).to_le_bytes());
        h.extend_from_slice(dict);
        h.resize(10 + len - 1, b' ');
        h.push(b'\n');
        let p = parse_npy_header(&h).unwrap();
        assert_eq!(p.shape, vec![3, 4]);
        assert_eq!(p.descr, "<f4");
    }

    #[test]
    fn bad_headers_are_errors() {
        assert_eq!(
            parse_npy_header(b"\x93NUMPY"),
            Err(NpyError::Truncated { need: 10, have: 6 })
        );
        assert_eq!(
            parse_npy_header(b"NOTNPY\x01\x00\x00\x00"),
            Err(NpyError::BadMagic)
        );
        assert!(matches!(
            parse_npy_header(b"\x93NUMPY\x01\x00\xff\x00{"),
            Err(NpyError::Truncated { .. })
        ));
        let mut h = npy_header(DType::F32, &[2]);
        let at = h.windows(5).position(|w| w == b"shape").unwrap();
        h[at + 9] = b'x';
        assert!(parse_npy_header(&h).is_err());
        for cut in 0..h.len() {
            let _ = parse_npy_header(&h[..cut]);
        }
    }
}
