use super::*;
use proptest::prelude::*;

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// Round to nearest even, written out on the bits: the reference the bf16 cast must meet.
fn bf16_reference(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x0040) as u16;
    }
    let lsb = (b >> 16) & 1;
    (b.wrapping_add(0x7FFF + lsb) >> 16) as u16
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<u32>().prop_map(f32::from_bits),
        -70_000f32..70_000.0,
        -1e-3f32..1e-3,
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(-0.0f32),
        Just(65_504.0f32),
        Just(65_520.0f32),
    ]
}

#[test]
fn every_bf16_and_f16_widens_as_half_does() {
    for w in 0..=u16::MAX {
        let bytes = w.to_le_bytes();
        let f = to_f32(DType::F16, &bytes).unwrap()[0];
        let h = half::f16::from_bits(w).to_f32();
        assert!(f.to_bits() == h.to_bits(), "f16 {w:#06x}: {f} vs {h}");

        let b = to_f32(DType::BF16, &bytes).unwrap()[0];
        // Bit for bit, the top half of the f32; `half` also sets the quiet bit of a NaN.
        assert_eq!(b.to_bits(), u32::from(w) << 16, "bf16 {w:#06x}");
        let hb = half::bf16::from_bits(w).to_f32();
        assert!(b.to_bits() == hb.to_bits() || (b.is_nan() && hb.is_nan()));
    }
}

#[test]
fn the_f16_slice_path_matches_one_at_a_time() {
    // Longer than the stack buffer, with a ragged tail byte.
    let words: Vec<u16> = (0..1000u32).map(|i| (i * 65_521 % 65_536) as u16).collect();
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.push(0xAB);
    let v = to_f32(DType::F16, &bytes).unwrap();
    assert_eq!(v.len(), words.len());
    for (x, &w) in v.iter().zip(&words) {
        assert_eq!(x.to_bits(), half::f16::from_bits(w).to_f32().to_bits());
    }
}

#[test]
fn special_values() {
    let v = [
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        f32::NAN,
        65_504.0,
        65_520.0,
        -1e6,
        1e-8,
    ];
    for dt in FLOATS {
        let back = to_f32(dt, &from_f32(dt, &v).unwrap()).unwrap();
        assert_eq!(back[0], f32::INFINITY, "{dt}");
        assert_eq!(back[1], f32::NEG_INFINITY, "{dt}");
        assert_eq!(back[2].to_bits(), (-0.0f32).to_bits(), "{dt}");
        assert_eq!(back[3].to_bits(), 0, "{dt}");
        assert!(back[4].is_nan(), "{dt}");
    }
    let h = to_f32(DType::F16, &from_f32(DType::F16, &v).unwrap()).unwrap();
    assert_eq!(h[5], 65_504.0); // the largest f16
    assert_eq!(h[6], f32::INFINITY); // rounds past the largest f16
    assert_eq!(h[7], f32::NEG_INFINITY); // beyond the range: an infinity of its sign
    assert_eq!(h[8], 0.0); // below the smallest subnormal's half
    let b = to_f32(DType::BF16, &from_f32(DType::BF16, &v).unwrap()).unwrap();
    assert_eq!((b[5], b[6]), (65_536.0, 65_536.0));
}

#[test]
fn integer_dtypes_are_refused_for_f32() {
    for dt in DType::ALL.into_iter().filter(|d| !d.is_float()) {
        assert_eq!(
            to_f32(dt, &[0; 8]),
            Err(ConvertError::NotFloat { dtype: dt })
        );
        assert_eq!(
            from_f32(dt, &[1.0]),
            Err(ConvertError::NotFloat { dtype: dt })
        );
        assert!(to_f32_into(dt, &[0; 8], &mut [0.0; 8]).is_err());
        assert!(from_f32_into(dt, &[1.0], &mut [0; 8]).is_err());
    }
}

#[test]
fn into_checks_the_output_length() {
    let mut out = [7f32; 3];
    assert_eq!(
        to_f32_into(DType::BF16, &[0; 8], &mut out),
        Err(ConvertError::Length {
            expected: 4,
            actual: 3
        })
    );
    assert_eq!(out, [7.0; 3]);
    let mut bytes = [0u8; 7];
    assert_eq!(
        from_f32_into(DType::F32, &[1.0, 2.0], &mut bytes),
        Err(ConvertError::Length {
            expected: 2,
            actual: 1
        })
    );
    assert!(to_f64_into(DType::I16, &[0; 6], &mut [0.0; 2]).is_err());
    // A trailing partial element is not an element.
    assert!(to_f32_into(DType::F32, &[0; 7], &mut [0.0; 1]).is_ok());
    assert_eq!(to_f32(DType::F32, &[0, 0, 0]).unwrap(), Vec::<f32>::new());
}

#[test]
fn to_f64_of_each_dtype() {
    assert_eq!(to_f64(DType::F32, &1.5f32.to_le_bytes()), vec![1.5]);
    assert_eq!(to_f64(DType::BF16, &[0x80, 0x3f]), vec![1.0]);
    assert_eq!(to_f64(DType::F16, &[0x00, 0x3c]), vec![1.0]);
    assert_eq!(to_f64(DType::F64, &(-0.1f64).to_le_bytes()), vec![-0.1]);
    assert_eq!(to_f64(DType::I8, &[0xff]), vec![-1.0]);
    assert_eq!(to_f64(DType::U8, &[0xff]), vec![255.0]);
    assert_eq!(to_f64(DType::Bool, &[0, 7, 1]), vec![0.0, 1.0, 1.0]);
    assert_eq!(to_f64(DType::I16, &(-300i16).to_le_bytes()), vec![-300.0]);
    assert_eq!(to_f64(DType::U16, &60_000u16.to_le_bytes()), vec![60_000.0]);
    assert_eq!(
        to_f64(DType::I32, &i32::MIN.to_le_bytes()),
        vec![-2_147_483_648.0]
    );
    assert_eq!(
        to_f64(DType::U32, &u32::MAX.to_le_bytes()),
        vec![4_294_967_295.0]
    );
    assert_eq!(to_f64(DType::I64, &(-3i64).to_le_bytes()), vec![-3.0]);
    // Above 2^53: the nearest f64.
    assert_eq!(
        to_f64(DType::U64, &(u64::MAX).to_le_bytes()),
        vec![18_446_744_073_709_551_616.0]
    );
    assert_eq!(to_f64(DType::F32, &[0, 0, 0]), Vec::<f64>::new());
}

proptest! {
    /// f32 values to bytes and back: exact for f32 and f64; for f16 and bf16 the value
    /// rounded as `half` rounds it (bf16 also as the reference rounding on the bits).
    #[test]
    fn from_f32_then_to_f32(v in prop::collection::vec(any_f32(), 0..200)) {
        for dt in FLOATS {
            let bytes = from_f32(dt, &v).unwrap();
            prop_assert_eq!(bytes.len(), v.len() * dt.size());
            let mut into = vec![0u8; bytes.len()];
            from_f32_into(dt, &v, &mut into).unwrap();
            prop_assert_eq!(&into, &bytes);
            let back = to_f32(dt, &bytes).unwrap();
            let mut back_into = vec![0f32; v.len()];
            to_f32_into(dt, &bytes, &mut back_into).unwrap();
            for (i, (&x, &y)) in v.iter().zip(&back).enumerate() {
                prop_assert_eq!(y.to_bits(), back_into[i].to_bits());
                let expect = match dt {
                    DType::F16 => half::f16::from_f32(x).to_f32(),
                    DType::BF16 => {
                        prop_assert_eq!(half::bf16::from_f32(x).to_bits(), bf16_reference(x));
                        half::bf16::from_f32(x).to_f32()
                    }
                    _ => x,
                };
                if x.is_nan() {
                    prop_assert!(y.is_nan(), "{}: {} -> {}", dt, x, y);
                } else {
                    prop_assert_eq!(y.to_bits(), expect.to_bits(), "{}: {} -> {}", dt, x, y);
                }
            }
        }
    }

    /// Bytes of a float dtype to f32 and back: the same bytes, but that a NaN gets its
    /// quiet bit (and keeps its sign).
    #[test]
    fn to_f32_then_from_f32(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        for dt in [DType::F16, DType::BF16, DType::F32] {
            let whole = &bytes[..bytes.len() / dt.size() * dt.size()];
            let back = from_f32(dt, &to_f32(dt, &bytes).unwrap()).unwrap();
            prop_assert_eq!(back.len(), whole.len());
            let nan_of = |w: u16| match dt {
                DType::F16 => half::f16::from_bits(w).is_nan(),
                _ => half::bf16::from_bits(w).is_nan(),
            };
            if dt == DType::F32 {
                for (a, b) in whole.chunks_exact(4).zip(back.chunks_exact(4)) {
                    let (a, b) = (f32::from_le_bytes([a[0], a[1], a[2], a[3]]), f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    prop_assert!(a.to_bits() == b.to_bits());
                }
                continue;
            }
            for (a, b) in whole.chunks_exact(2).zip(back.chunks_exact(2)) {
                let (a, b) = (u16::from_le_bytes([a[0], a[1]]), u16::from_le_bytes([b[0], b[1]]));
                if nan_of(a) {
                    prop_assert!(nan_of(b) && (a ^ b) & 0x8000 == 0, "{}: {:#06x} -> {:#06x}", dt, a, b);
                } else {
                    prop_assert_eq!(a, b, "{}", dt);
                }
            }
        }
    }

    /// f64 bytes: to f32 rounds to nearest, like `as`; to f64 is exact.
    #[test]
    fn f64_bytes(v in prop::collection::vec(any::<f64>(), 0..100)) {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let f = to_f32(DType::F64, &bytes).unwrap();
        let d = to_f64(DType::F64, &bytes);
        for ((&x, &y), &z) in v.iter().zip(&f).zip(&d) {
            prop_assert!(y.to_bits() == (x as f32).to_bits() || (x.is_nan() && y.is_nan()));
            prop_assert!(z.to_bits() == x.to_bits());
        }
    }

    /// to_f64 is exact: it agrees with the values read with the standard library and with
    /// the f32 widening for floats.
    #[test]
    fn to_f64_is_exact(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for dt in DType::ALL {
            let d = to_f64(dt, &bytes);
            let mut into = vec![0f64; bytes.len() / dt.size() * dt.values_per_element()];
            to_f64_into(dt, &bytes, &mut into).unwrap();
            prop_assert_eq!(d.len(), into.len());
            if dt.values_per_element() > 1 {
                // Packed groups: sub_byte_formats_decode_their_reference_values.
                prop_assert!(d.iter().zip(&into).all(|(x, y)| x.to_bits() == y.to_bits()));
                continue;
            }
            let whole = bytes.chunks_exact(dt.size());
            for ((c, &x), &y) in whole.zip(&d).zip(&into) {
                prop_assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
                let mut a = [0u8; 8];
                a[..c.len()].copy_from_slice(c);
                let expect = match dt {
                    DType::I8 => f64::from(c[0] as i8),
                    DType::U8 => f64::from(c[0]),
                    DType::Bool => if c[0] == 0 { 0.0 } else { 1.0 },
                    DType::I16 => f64::from(i16::from_le_bytes([c[0], c[1]])),
                    DType::U16 => f64::from(u16::from_le_bytes([c[0], c[1]])),
                    DType::I32 => f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    DType::U32 => f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    DType::I64 => i64::from_le_bytes(a) as f64,
                    DType::U64 => u64::from_le_bytes(a) as f64,
                    DType::F64 => f64::from_le_bytes(a),
                    DType::C64 => f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    DType::F8E5M2 => half::f16::from_bits(u16::from(c[0]) << 8).to_f64(),
                    // The other 8-bit floats: fp8_formats_decode_their_reference_values.
                    DType::F8E4M3 | DType::F8E8M0 | DType::F8E4M3Fnuz | DType::F8E5M2Fnuz => x,
                    _ => f64::from(to_f32(dt, c).unwrap()[0]),
                };
                prop_assert!(x.to_bits() == expect.to_bits() || (x.is_nan() && expect.is_nan()),
                    "{}: {:?} -> {} (expected {})", dt, c, x, expect);
            }
        }
    }
}

#[test]
fn fp8_formats_decode_their_reference_values() {
    let one = |d: DType, b: u8| to_f64(d, &[b])[0];
    // E5M2 is the top byte of a binary16, specials included.
    for b in 0..=255u8 {
        let want = half::f16::from_bits(u16::from(b) << 8).to_f64();
        let got = one(DType::F8E5M2, b);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "E5M2 {b:#04x}: {got} != {want}"
        );
    }
    // E4M3 (fn): 1.0, the largest finite, the smallest subnormal, NaN, negative zero.
    assert_eq!(one(DType::F8E4M3, 0x38), 1.0);
    assert_eq!(one(DType::F8E4M3, 0x7E), 448.0);
    assert_eq!(one(DType::F8E4M3, 0x01), 2f64.powi(-9));
    assert_eq!(one(DType::F8E4M3, 0xB8), -1.0);
    assert!(one(DType::F8E4M3, 0x7F).is_nan() && one(DType::F8E4M3, 0xFF).is_nan());
    assert!(one(DType::F8E4M3, 0x80) == 0.0 && one(DType::F8E4M3, 0x80).is_sign_negative());
    // FNUZ: bias one more, 0x80 the only NaN.
    assert_eq!(one(DType::F8E4M3Fnuz, 0x40), 1.0);
    assert_eq!(one(DType::F8E4M3Fnuz, 0x7F), 240.0);
    assert_eq!(one(DType::F8E4M3Fnuz, 0x01), 2f64.powi(-10));
    assert!(one(DType::F8E4M3Fnuz, 0x80).is_nan());
    assert_eq!(one(DType::F8E5M2Fnuz, 0x40), 1.0);
    assert_eq!(one(DType::F8E5M2Fnuz, 0x7F), 57344.0);
    assert!(one(DType::F8E5M2Fnuz, 0x80).is_nan());
    // E8M0: powers of two.
    assert_eq!(one(DType::F8E8M0, 127), 1.0);
    assert_eq!(one(DType::F8E8M0, 0), 2f64.powi(-127));
    assert_eq!(one(DType::F8E8M0, 130), 8.0);
    assert!(one(DType::F8E8M0, 255).is_nan());
    // Complex: the real parts.
    let c: Vec<u8> = [1.5f32, -2.0, 3.0, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(to_f64(DType::C64, &c), vec![1.5, 3.0]);
}

#[test]
fn sub_byte_formats_decode_their_reference_values() {
    // FP4 E2M1, every code: the OCP MX table; the low nibble is the first value.
    let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for code in 0..16u8 {
        let byte = code | (15 - code) << 4;
        let v = to_f64(DType::F4E2M1x2, &[byte]);
        let magnitude = |c: u8| e2m1[usize::from(c & 7)];
        let sign = |c: u8| if c & 8 != 0 { -1.0 } else { 1.0 };
        assert_eq!(
            v,
            vec![
                sign(code) * magnitude(code),
                sign(15 - code) * magnitude(15 - code)
            ]
        );
    }
    assert!(to_f64(DType::F4E2M1x2, &[0x08])[0].is_sign_negative());
    // FP6: value i in bits 6i..6i+6 of the little-endian 24-bit group.
    let group = |codes: [u32; 4]| {
        let w = codes[0] | codes[1] << 6 | codes[2] << 12 | codes[3] << 18;
        w.to_le_bytes()[..3].to_vec()
    };
    // E2M3: 1.0, -(smallest subnormal), the largest, 0.
    let g = group([0x08, 0x21, 0x1F, 0x00]);
    assert_eq!(to_f64(DType::F6E2M3x4, &g), vec![1.0, -0.125, 7.5, 0.0]);
    // E3M2: 1.0, the smallest subnormal, the largest, -1.5.
    let g = group([0x0C, 0x01, 0x1F, 0x2E]);
    assert_eq!(to_f64(DType::F6E3M2x4, &g), vec![1.0, 0.0625, 28.0, -1.5]);
    // A trailing partial group is ignored; into checks the value count.
    assert_eq!(to_f64(DType::F6E3M2x4, &[0, 0, 0, 0, 0]).len(), 4);
    assert!(to_f64_into(DType::F6E3M2x4, &[0; 6], &mut [0.0; 2]).is_err());
    assert!(to_f64_into(DType::F4E2M1x2, &[0; 2], &mut [0.0; 4]).is_ok());
}
