//! The ggml tensor types: ids as GGUF stores them, block sizes and names.
//!
//! A quantized row of `n` values is `n / block_size` blocks of `type_size`
//! bytes each. Ids follow ggml's `enum ggml_type`; ids that ggml retired are
//! unknown here.

use std::fmt;

/// A ggml tensor type, numbered as in GGUF (`ggml_type`).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

/// Every known type, in id order.
pub const ALL_TYPES: [GgmlType; 32] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS,
        IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16,
        TQ1_0, TQ2_0, MXFP4,
    ]
};

/// Values per super-block of the K-quants.
pub const QK_K: usize = 256;

impl GgmlType {
    /// The type with this GGUF id, if ggml defines one.
    pub fn from_id(id: u32) -> Option<Self> {
        ALL_TYPES.iter().copied().find(|t| *t as u32 == id)
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// Values per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S
            | IQ3_S | IQ2_S | IQ4_XS | IQ1_M | TQ1_0 | TQ2_0 => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
            IQ2_XXS => 66,
            IQ2_XS => 74,
            IQ3_XXS => 98,
            IQ1_S => 50,
            IQ4_NL => 18,
            IQ3_S => 110,
            IQ2_S => 82,
            IQ4_XS => 136,
            IQ1_M => 56,
            TQ1_0 => 54,
            TQ2_0 => 66,
            MXFP4 => 17,
        }
    }

    /// Bytes taken by a row of `n` values, or `None` when `n` is not a whole
    /// number of blocks or the size overflows.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    /// True for the block-quantized types.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// ggml's name for the type (`"q4_0"`, `"f16"`, ...), upper-cased as in
    /// llama.cpp's tables.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// The `llama_ftype` that llama.cpp writes to `general.file_type` for a
    /// file whose weights are all of this type, for the types a weight file
    /// can be made of by quantizing every tensor one way (llama-quantize's
    /// `--pure`). Q8_1 and Q8_K are activation types and have none.
    pub fn llama_ftype(self) -> Option<u32> {
        use GgmlType::*;
        Some(match self {
            F32 => 0,  // LLAMA_FTYPE_ALL_F32
            F16 => 1,  // LLAMA_FTYPE_MOSTLY_F16
            Q4_0 => 2, // LLAMA_FTYPE_MOSTLY_Q4_0
            Q4_1 => 3, // LLAMA_FTYPE_MOSTLY_Q4_1
            Q8_0 => 7, // LLAMA_FTYPE_MOSTLY_Q8_0
            Q5_0 => 8, // LLAMA_FTYPE_MOSTLY_Q5_0
            Q5_1 => 9, // LLAMA_FTYPE_MOSTLY_Q5_1
            Q2_K => 10,
            Q3_K => 11, // Q3_K_S
            Q4_K => 14, // Q4_K_S
            Q5_K => 16, // Q5_K_S
            Q6_K => 18,
            IQ2_XXS => 19,
            IQ2_XS => 20,
            IQ3_XXS => 23,
            IQ1_S => 24,
            IQ4_NL => 25,
            IQ3_S => 26,
            IQ2_S => 28,
            IQ4_XS => 30,
            IQ1_M => 31,
            BF16 => 32,
            TQ1_0 => 36,
            TQ2_0 => 37,
            MXFP4 => 38, // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
            Q8_1 | Q8_K | I8 | I16 | I32 | I64 | F64 => return None,
        })
    }

    /// Parses a name as `name()` prints it, in any case.
    pub fn from_name(s: &str) -> Option<Self> {
        ALL_TYPES
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in ALL_TYPES {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(&t.name().to_lowercase()), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None, "Q4_2 was retired");
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn row_bytes_needs_whole_blocks() {
        assert_eq!(GgmlType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_bytes(33), None);
        assert_eq!(GgmlType::Q6_K.row_bytes(512), Some(420));
        assert_eq!(GgmlType::F32.row_bytes(usize::MAX), None);
    }
}
