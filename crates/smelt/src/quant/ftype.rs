//! llama.cpp's file types (`llama_ftype`): what `general.file_type` says a
//! model file is, as llama-quantize names them on its command line
//! (`Q4_K_M`) and as llama-bench and llama-cli print them
//! (`Q4_K - Medium`, `llama_ftype_name`).
//!
//! A file type is a recipe, not one tensor type: `Q4_K_M` is mostly Q4_K
//! with some tensors in Q6_K (see `crate::quantize`'s mixes).

use std::fmt;

use super::GgmlType;

/// A `llama_ftype`, numbered as in `general.file_type`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FileType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 7,
    Q5_0 = 8,
    Q5_1 = 9,
    Q2_K = 10,
    Q3_K_S = 11,
    Q3_K_M = 12,
    Q3_K_L = 13,
    Q4_K_S = 14,
    Q4_K_M = 15,
    Q5_K_S = 16,
    Q5_K_M = 17,
    Q6_K = 18,
    IQ2_XXS = 19,
    IQ2_XS = 20,
    Q2_K_S = 21,
    IQ3_XS = 22,
    IQ3_XXS = 23,
    IQ1_S = 24,
    IQ4_NL = 25,
    IQ3_S = 26,
    IQ3_M = 27,
    IQ2_S = 28,
    IQ2_M = 29,
    IQ4_XS = 30,
    IQ1_M = 31,
    BF16 = 32,
    TQ1_0 = 36,
    TQ2_0 = 37,
    MXFP4_MOE = 38,
    NVFP4 = 39,
    Q1_0 = 40,
    Q2_0 = 41,
}

use FileType::*;

/// Every file type, with llama-quantize's name and `llama_ftype_name`'s
/// description.
const TABLE: [(FileType, &str, &str); 36] = [
    (F32, "F32", "all F32"),
    (F16, "F16", "F16"),
    (Q4_0, "Q4_0", "Q4_0"),
    (Q4_1, "Q4_1", "Q4_1"),
    (Q8_0, "Q8_0", "Q8_0"),
    (Q5_0, "Q5_0", "Q5_0"),
    (Q5_1, "Q5_1", "Q5_1"),
    (Q2_K, "Q2_K", "Q2_K - Medium"),
    (Q3_K_S, "Q3_K_S", "Q3_K - Small"),
    (Q3_K_M, "Q3_K_M", "Q3_K - Medium"),
    (Q3_K_L, "Q3_K_L", "Q3_K - Large"),
    (Q4_K_S, "Q4_K_S", "Q4_K - Small"),
    (Q4_K_M, "Q4_K_M", "Q4_K - Medium"),
    (Q5_K_S, "Q5_K_S", "Q5_K - Small"),
    (Q5_K_M, "Q5_K_M", "Q5_K - Medium"),
    (Q6_K, "Q6_K", "Q6_K"),
    (IQ2_XXS, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw"),
    (IQ2_XS, "IQ2_XS", "IQ2_XS - 2.3125 bpw"),
    (Q2_K_S, "Q2_K_S", "Q2_K - Small"),
    (IQ3_XS, "IQ3_XS", "IQ3_XS - 3.3 bpw"),
    (IQ3_XXS, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw"),
    (IQ1_S, "IQ1_S", "IQ1_S - 1.5625 bpw"),
    (IQ4_NL, "IQ4_NL", "IQ4_NL - 4.5 bpw"),
    (IQ3_S, "IQ3_S", "IQ3_S - 3.4375 bpw"),
    (IQ3_M, "IQ3_M", "IQ3_S mix - 3.66 bpw"),
    (IQ2_S, "IQ2_S", "IQ2_S - 2.5 bpw"),
    (IQ2_M, "IQ2_M", "IQ2_M - 2.7 bpw"),
    (IQ4_XS, "IQ4_XS", "IQ4_XS - 4.25 bpw"),
    (IQ1_M, "IQ1_M", "IQ1_M - 1.75 bpw"),
    (BF16, "BF16", "BF16"),
    (TQ1_0, "TQ1_0", "TQ1_0 - 1.69 bpw ternary"),
    (TQ2_0, "TQ2_0", "TQ2_0 - 2.06 bpw ternary"),
    (MXFP4_MOE, "MXFP4_MOE", "MXFP4 MoE"),
    (NVFP4, "NVFP4", "NVFP4"),
    (Q1_0, "Q1_0", "Q1_0"),
    (Q2_0, "Q2_0", "Q2_0"),
];

/// llama-quantize's shorter names for the medium mixes.
const ALIASES: [(&str, FileType); 3] = [("Q3_K", Q3_K_M), ("Q4_K", Q4_K_M), ("Q5_K", Q5_K_M)];

/// llama.cpp's description of a file type it does not know.
pub const UNKNOWN_FILE_TYPE: &str = "unknown, may not work";

impl FileType {
    pub fn id(self) -> u32 {
        self as u32
    }

    fn entry(self) -> (FileType, &'static str, &'static str) {
        *TABLE
            .iter()
            .find(|e| e.0 == self)
            .expect("every file type is in the table")
    }

    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|e| e.0.id() == id).map(|e| e.0)
    }

    /// The name llama-quantize takes (`Q4_K_M`).
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// `llama_ftype_name`: what llama-bench prints (`Q4_K - Medium`).
    pub fn description(self) -> &'static str {
        self.entry().2
    }

    /// Parses a name as llama-quantize does: any case, the aliases `Q3_K`,
    /// `Q4_K` and `Q5_K` for the medium mixes, or the number itself.
    pub fn from_name(s: &str) -> Option<Self> {
        if let Ok(id) = s.parse::<u32>() {
            return Self::from_id(id);
        }
        let upper = s.to_ascii_uppercase();
        ALIASES
            .iter()
            .find(|a| a.0 == upper)
            .map(|a| a.1)
            .or_else(|| TABLE.iter().find(|e| e.1 == upper).map(|e| e.0))
    }

    /// Every file type, in id order.
    pub fn all() -> impl Iterator<Item = FileType> {
        TABLE.iter().map(|e| e.0)
    }

    /// `llama_ftype_get_default_type`: the type most weights get; `None`
    /// where smelt has no such tensor type.
    pub fn default_type(self) -> Option<GgmlType> {
        Some(match self {
            F32 => GgmlType::F32,
            F16 => GgmlType::F16,
            BF16 => GgmlType::BF16,
            Q4_0 => GgmlType::Q4_0,
            Q4_1 => GgmlType::Q4_1,
            Q5_0 => GgmlType::Q5_0,
            Q5_1 => GgmlType::Q5_1,
            Q8_0 => GgmlType::Q8_0,
            Q2_K | Q2_K_S => GgmlType::Q2_K,
            Q3_K_S | Q3_K_M | Q3_K_L => GgmlType::Q3_K,
            Q4_K_S | Q4_K_M => GgmlType::Q4_K,
            Q5_K_S | Q5_K_M => GgmlType::Q5_K,
            Q6_K => GgmlType::Q6_K,
            IQ2_XXS => GgmlType::IQ2_XXS,
            IQ2_XS | IQ2_S => GgmlType::IQ2_XS,
            IQ2_M => GgmlType::IQ2_S,
            IQ3_XXS => GgmlType::IQ3_XXS,
            IQ3_XS | IQ3_S | IQ3_M => GgmlType::IQ3_S,
            IQ1_S => GgmlType::IQ1_S,
            IQ1_M => GgmlType::IQ1_M,
            IQ4_NL => GgmlType::IQ4_NL,
            IQ4_XS => GgmlType::IQ4_XS,
            TQ1_0 => GgmlType::TQ1_0,
            TQ2_0 => GgmlType::TQ2_0,
            MXFP4_MOE => GgmlType::MXFP4,
            NVFP4 | Q1_0 | Q2_0 => return None,
        })
    }

    /// The file type llama.cpp guesses from the type most tensors have,
    /// when `general.file_type` is missing (`llama_model_loader`).
    pub fn guessed_from(dtype: GgmlType) -> Self {
        use GgmlType as T;
        match dtype {
            T::F16 => F16,
            T::BF16 => BF16,
            T::Q4_0 => Q4_0,
            T::Q4_1 => Q4_1,
            T::Q5_0 => Q5_0,
            T::Q5_1 => Q5_1,
            T::Q8_0 => Q8_0,
            T::Q2_K => Q2_K,
            T::Q3_K => Q3_K_M,
            T::Q4_K => Q4_K_M,
            T::Q5_K => Q5_K_M,
            T::Q6_K => Q6_K,
            T::TQ1_0 => TQ1_0,
            T::TQ2_0 => TQ2_0,
            T::IQ2_XXS => IQ2_XXS,
            T::IQ2_XS => IQ2_XS,
            T::IQ2_S => IQ2_S,
            T::IQ3_XXS => IQ3_XXS,
            T::IQ1_S => IQ1_S,
            T::IQ1_M => IQ1_M,
            T::IQ4_NL => IQ4_NL,
            T::IQ4_XS => IQ4_XS,
            T::IQ3_S => IQ3_S,
            _ => F32,
        }
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What llama.cpp prints for a file's type (`llama_ftype_name`): the
/// description of `general.file_type` when the file has one (llama.cpp's
/// words for an id it does not know), else of the type most tensors have,
/// marked `(guessed)`. `tensor_types` are in llama.cpp's tensor order (see
/// `crate::quantize::llama_order`), which decides ties.
pub fn describe_file_type(
    file_type: Option<u32>,
    tensor_types: impl IntoIterator<Item = GgmlType>,
) -> String {
    if let Some(id) = file_type {
        return FileType::from_id(id)
            .map_or(UNKNOWN_FILE_TYPE, FileType::description)
            .to_string();
    }
    // The type that first reaches the largest count, as llama.cpp counts.
    let mut counts = std::collections::HashMap::new();
    let (mut best, mut best_count) = (None, 0usize);
    for t in tensor_types {
        let c = counts.entry(t).or_insert(0usize);
        *c += 1;
        if *c > best_count {
            best_count = *c;
            best = Some(t);
        }
    }
    let guess = best.map_or(F32, FileType::guessed_from);
    format!("(guessed) {}", guess.description())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ids_and_aliases() {
        for t in FileType::all() {
            assert_eq!(FileType::from_id(t.id()), Some(t));
            assert_eq!(FileType::from_name(&t.name().to_lowercase()), Some(t));
        }
        assert_eq!(FileType::from_name("q4_k"), Some(Q4_K_M));
        assert_eq!(FileType::from_name("15"), Some(Q4_K_M));
        assert_eq!(FileType::from_name("Q4_K_X"), None);
        assert_eq!(Q4_K_M.description(), "Q4_K - Medium");
        assert_eq!(FileType::from_id(4), None, "Q4_1_SOME_F16 was retired");
    }

    #[test]
    fn file_type_description() {
        assert_eq!(describe_file_type(Some(15), []), "Q4_K - Medium");
        assert_eq!(describe_file_type(Some(99), []), UNKNOWN_FILE_TYPE);
        let types = [
            GgmlType::F32,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q4_K,
        ];
        assert_eq!(describe_file_type(None, types), "(guessed) Q4_K - Medium");
        assert_eq!(describe_file_type(None, []), "(guessed) all F32");
    }
}
