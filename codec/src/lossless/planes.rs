//! Byte-plane transform: XOR against a base, rotate floats, split into planes, and back.
//!
//! A float word is rotated left by one bit before splitting, so the sign moves to bit 0
//! and the exponent fills the top byte (bf16, f32) or its top bits (f16, f64): the plane
//! that holds the exponent then has few distinct values and codes well. XOR with a base of
//! the same dtype is applied to the word first (rotation and XOR commute).

/// Splits `data` (and `data ^ base`) into `W` planes of `n` bytes in `planes`
/// (`planes.len() == data.len()`): plane `k` holds byte `k` (little-endian) of each word.
pub(crate) fn split<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    rotate: bool,
    planes: &mut [u8],
) {
    let n = data.len() / W;
    let (p0, rest) = planes.split_at_mut(n);
    match W {
        1 => match base {
            Some(b) => {
                for ((p, &d), &b) in p0.iter_mut().zip(data).zip(b) {
                    *p = d ^ b;
                }
            }
            None => p0.copy_from_slice(data),
        },
        2 => split2(data, base, rotate, p0, rest),
        4 => split4(data, base, rotate, p0, rest),
        _ => split_generic::<W>(data, base, rotate, planes),
    }
}

fn split2(data: &[u8], base: Option<&[u8]>, rotate: bool, p0: &mut [u8], p1: &mut [u8]) {
    let r = u32::from(rotate);
    let words = data.chunks_exact(2);
    match base {
        Some(b) => {
            for (i, (d, b)) in words.zip(b.chunks_exact(2)).enumerate() {
                let w = (u16::from_le_bytes([d[0], d[1]]) ^ u16::from_le_bytes([b[0], b[1]]))
                    .rotate_left(r);
                p0[i] = w as u8;
                p1[i] = (w >> 8) as u8;
            }
        }
        None => {
            for (i, d) in words.enumerate() {
                let w = u16::from_le_bytes([d[0], d[1]]).rotate_left(r);
                p0[i] = w as u8;
                p1[i] = (w >> 8) as u8;
            }
        }
    }
}

fn split4(data: &[u8], base: Option<&[u8]>, rotate: bool, p0: &mut [u8], rest: &mut [u8]) {
    let n = p0.len();
    let (p1, rest) = rest.split_at_mut(n);
    let (p2, p3) = rest.split_at_mut(n);
    let r = u32::from(rotate);
    let mut put = |i: usize, w: u32| {
        let b = w.to_le_bytes();
        p0[i] = b[0];
        p1[i] = b[1];
        p2[i] = b[2];
        p3[i] = b[3];
    };
    match base {
        Some(bs) => {
            for (i, (d, b)) in data.chunks_exact(4).zip(bs.chunks_exact(4)).enumerate() {
                put(i, (le32(d) ^ le32(b)).rotate_left(r));
            }
        }
        None => {
            for (i, d) in data.chunks_exact(4).enumerate() {
                put(i, le32(d).rotate_left(r));
            }
        }
    }
}

fn split_generic<const W: usize>(
    data: &[u8],
    base: Option<&[u8]>,
    rotate: bool,
    planes: &mut [u8],
) {
    let n = data.len() / W;
    for (i, d) in data.chunks_exact(W).enumerate() {
        let mut w = word::<W>(d);
        if let Some(b) = base {
            w ^= word::<W>(&b[i * W..i * W + W]);
        }
        if rotate {
            w = rotl::<W>(w);
        }
        for k in 0..W {
            planes[k * n + i] = (w >> (8 * k)) as u8;
        }
    }
}

/// The inverse of [`split`]: rebuilds words from `W` plane slices (each `n` bytes, or one
/// constant byte), un-rotates, XORs with `base`, and writes `out` (`n * W` bytes).
pub(crate) fn join<const W: usize>(
    planes: &[Plane<'_>; W],
    base: Option<&[u8]>,
    rotate: bool,
    out: &mut [u8],
) {
    let n = out.len() / W;
    match (W, planes.as_slice()) {
        (2, [Plane::Bytes(a), Plane::Bytes(b)]) => join2(a, b, base, rotate, out),
        (4, [Plane::Bytes(a), Plane::Bytes(b), Plane::Bytes(c), Plane::Bytes(d)]) => {
            join4([a, b, c, d], base, rotate, out)
        }
        _ => {
            for i in 0..n {
                let mut w = 0u64;
                for (k, p) in planes.iter().enumerate() {
                    w |= u64::from(p.at(i)) << (8 * k);
                }
                if rotate {
                    w = rotr::<W>(w);
                }
                let dst = &mut out[i * W..i * W + W];
                dst.copy_from_slice(&w.to_le_bytes()[..W]);
                if let Some(b) = base {
                    for (o, &b) in dst.iter_mut().zip(&b[i * W..i * W + W]) {
                        *o ^= b;
                    }
                }
            }
        }
    }
}

fn join2(p0: &[u8], p1: &[u8], base: Option<&[u8]>, rotate: bool, out: &mut [u8]) {
    let r = u32::from(rotate);
    for ((o, &a), &b) in out.chunks_exact_mut(2).zip(p0).zip(p1) {
        let w = u16::from_le_bytes([a, b]).rotate_right(r);
        o.copy_from_slice(&w.to_le_bytes());
    }
    if let Some(b) = base {
        xor_in_place(out, b);
    }
}

fn join4(p: [&[u8]; 4], base: Option<&[u8]>, rotate: bool, out: &mut [u8]) {
    let r = u32::from(rotate);
    for (i, o) in out.chunks_exact_mut(4).enumerate() {
        let w = u32::from_le_bytes([p[0][i], p[1][i], p[2][i], p[3][i]]).rotate_right(r);
        o.copy_from_slice(&w.to_le_bytes());
    }
    if let Some(b) = base {
        xor_in_place(out, b);
    }
}

fn xor_in_place(out: &mut [u8], base: &[u8]) {
    for (o, &b) in out.iter_mut().zip(base) {
        *o ^= b;
    }
}

/// One decoded plane: its bytes, or a single byte repeated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plane<'a> {
    /// `n` bytes.
    Bytes(&'a [u8]),
    /// The same byte `n` times.
    Constant(u8),
}

impl Plane<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> u8 {
        match self {
            Plane::Bytes(b) => b[i],
            Plane::Constant(c) => *c,
        }
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn word<const W: usize>(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a[..W].copy_from_slice(&b[..W]);
    u64::from_le_bytes(a)
}

fn mask<const W: usize>() -> u64 {
    if W >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * W)) - 1
    }
}

fn rotl<const W: usize>(w: u64) -> u64 {
    ((w << 1) | (w >> (8 * W - 1))) & mask::<W>()
}

fn rotr<const W: usize>(w: u64) -> u64 {
    ((w >> 1) | (w << (8 * W - 1))) & mask::<W>()
}
