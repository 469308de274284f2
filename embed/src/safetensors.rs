//! The safetensors container: an 8-byte little-endian header length, a JSON
//! header naming each tensor's dtype, shape and byte range, then the data.
//!
//! Owns: checking a file's header against its length (every range inside the
//! data, the byte count equal to shape × dtype size, no overflow) before any
//! tensor is read. Never: trusts a size from the file before checking it,
//! allocates from one, or panics on a user's bytes.

use std::collections::HashMap;

use serde::Deserialize;

use crate::ModelError;

/// The element types a model2vec table may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
    I8,
    I32,
    I64,
}

impl Dtype {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "I8" => Dtype::I8,
            "I32" => Dtype::I32,
            "I64" => Dtype::I64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 => 1,
            Dtype::F16 | Dtype::BF16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::I64 => 8,
        }
    }
}

#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [usize; 2],
}

/// One checked tensor: where its bytes are in the file.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: usize,
    pub end: usize,
}

/// The checked table of contents of a safetensors file.
pub fn parse(bytes: &[u8]) -> Result<HashMap<String, Tensor>, ModelError> {
    let bad = |why: String| ModelError::Tensors(why);
    let len: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("shorter than its 8-byte header length".into()))?;
    let header_len = usize::try_from(u64::from_le_bytes(len))
        .ok()
        .filter(|&n| n <= bytes.len() - 8)
        .ok_or_else(|| bad("header length past the end of the file".into()))?;
    let data_start = 8 + header_len;
    let data_len = bytes.len() - data_start;
    let header: HashMap<String, serde_json::Value> = serde_json::from_slice(&bytes[8..data_start])
        .map_err(|e| bad(format!("header is not JSON ({e})")))?;
    let mut out = HashMap::new();
    for (name, value) in header {
        if name == "__metadata__" {
            continue;
        }
        let entry: Entry =
            serde_json::from_value(value).map_err(|e| bad(format!("tensor {name:?}: {e}")))?;
        let dtype = Dtype::parse(&entry.dtype).ok_or_else(|| {
            bad(format!(
                "tensor {name:?}: dtype {} not supported",
                entry.dtype
            ))
        })?;
        let [start, end] = entry.data_offsets;
        if start > end || end > data_len {
            return Err(bad(format!("tensor {name:?}: byte range outside the file")));
        }
        let expected = entry
            .shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        if expected != Some(end - start) {
            return Err(bad(format!(
                "tensor {name:?}: {} bytes do not hold shape {:?} of {:?}",
                end - start,
                entry.shape,
                dtype
            )));
        }
        out.insert(
            name,
            Tensor {
                dtype,
                shape: entry.shape,
                start: data_start + start,
                end: data_start + end,
            },
        );
    }
    Ok(out)
}

/// An IEEE half-precision value, widened exactly.
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exp = u32::from((bits >> 10) & 0x1f);
    let man = u32::from(bits & 0x3ff);
    let magnitude = match (exp, man) {
        (0, 0) => 0,
        // Subnormal: man × 2^-24, exact in f32.
        (0, m) => {
            let v = m as f32 / 16_777_216.0;
            return if sign == 0 { v } else { -v };
        }
        (0x1f, 0) => 0xff << 23,
        (0x1f, m) => (0xff << 23) | (m << 13),
        (e, m) => ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// A bfloat16 value, widened exactly.
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn a_well_formed_file_is_read() {
        let f = file(
            r#"{"__metadata__":{"a":"b"},"embeddings":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        let t = &parse(&f).unwrap()["embeddings"];
        assert_eq!(
            (t.dtype, t.shape.clone(), t.end - t.start),
            (Dtype::F16, vec![2, 2], 8)
        );
    }

    #[test]
    fn ranges_and_sizes_are_checked() {
        for header in [
            r#"{"e":{"dtype":"F16","shape":[2,2],"data_offsets":[0,9]}}"#,
            r#"{"e":{"dtype":"F16","shape":[2,3],"data_offsets":[0,8]}}"#,
            r#"{"e":{"dtype":"F16","shape":[2,2],"data_offsets":[8,0]}}"#,
            r#"{"e":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#,
            r#"{"e":{"dtype":"F32","shape":[18446744073709551615,4],"data_offsets":[0,8]}}"#,
            r#"{"e":3}"#,
            "not json",
        ] {
            assert!(parse(&file(header, &[0; 8])).is_err(), "{header}");
        }
        assert!(parse(&[1, 0]).is_err());
        assert!(parse(&u64::MAX.to_le_bytes()).is_err());
    }

    #[test]
    fn half_floats_widen_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x8001), -5.960_464_5e-8);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert!(f16_to_f32(0x7c00).is_infinite());
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }
}
