//! The kernels: one family per `<family>.wgsl`, each with a `<family>.rs`
//! beside it that owns
//! - its variants (the family's type) and the defines that build them,
//! - its bindings, named as the WGSL names them, in `@binding` order,
//! - its parameter block, a `#[repr(C)]` struct that the WGSL declares as
//!   `struct Params` (tests/kernel_layouts.rs checks both against the WGSL),
//! - the functions that build its dispatches ([`Dispatch`]).
//!
//! [`Kernel`] is one variant of one family and asks its family the rest.
//! Adding a family is its two files, its `mod` line and its line in
//! `families!` below.
//!
//! WGSL has no preprocessor, so variants come from a small one
//! (`pipelines::preprocess`): `#ifdef`/`#ifndef`/`#else`/`#endif` lines and
//! `{{NAME}}` values. The shared files (`common`, `reduce`, `quant`,
//! `exact`, `rotate`, `q8_lanes`) are included by the families that use them.

use crate::backend::Tensor;
use crate::quant::GgmlType;

/// Declares a family's parameter block: a `#[repr(C)]` struct of 32-bit
/// fields, as its WGSL declares `struct Params`, and the field list the
/// layout test checks against the WGSL.
macro_rules! kernel_params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl super::KernelParams for $name {
            const FIELDS: &'static [super::Field] = &[$(super::Field {
                name: stringify!($field),
                offset: std::mem::offset_of!($name, $field),
                size: std::mem::size_of::<$ty>(),
            },)*];
        }

        const _: () = assert!(std::mem::size_of::<$name>() <= super::PARAMS_BYTES as usize);
    };
}

/// The families, one line each: `Kernel`'s variant and the family's type
/// in its module.
macro_rules! families {
    ($($variant:ident($module:ident::$family:ident),)*) => {
        /// One compute kernel: a variant of one family (without the adapter
        /// features, which `source` takes).
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kernel {
            $($variant($module::$family),)*
        }

        $(impl From<$module::$family> for Kernel {
            fn from(k: $module::$family) -> Kernel {
                Kernel::$variant(k)
            }
        })*

        impl Kernel {
            /// Every kernel the backend can build, for the naga/Metal test.
            pub fn all() -> Vec<Kernel> {
                let mut v = Vec::new();
                $(v.extend(<$module::$family as Family>::all().into_iter().map(Kernel::$variant));)*
                v
            }

            /// Whether the kernel exists for these adapter features.
            pub fn builds_with(self, f: ShaderFeatures) -> bool {
                match self {
                    $(Kernel::$variant(k) => k.builds_with(f),)*
                }
            }

            /// The storage bindings after the parameter block (binding 0),
            /// in binding order, as the WGSL declares them.
            pub fn bindings(self) -> &'static [Binding] {
                match self {
                    $(Kernel::$variant(k) => k.bindings(),)*
                }
            }

            /// The parameter block's fields, as the WGSL declares them.
            pub fn param_fields(self) -> &'static [Field] {
                match self {
                    $(Kernel::$variant(_) => {
                        <<$module::$family as Family>::Params as KernelParams>::FIELDS
                    })*
                }
            }

            fn family_source(self, f: ShaderFeatures, s: &mut Source) {
                match self {
                    $(Kernel::$variant(k) => k.source(f, s),)*
                }
            }
        }

        /// As the family's variant: the label of pipelines and the perf table.
        impl std::fmt::Debug for Kernel {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(Kernel::$variant(k) => std::fmt::Debug::fmt(k, f),)*
                }
            }
        }
    };
}

pub mod attention;
pub mod attention_coop;
pub mod copy;
pub mod elementwise;
pub mod get_rows;
pub mod kv_store;
pub mod matmul;
pub mod matmul_coop;
pub mod matmul_id;
pub mod matmul_q8;
pub mod matvec;
pub mod matvec_blocks;
pub mod moe;
pub mod norm;
pub mod norm_half;
pub mod norm_rope;
pub mod quantize;
pub mod rope;
pub mod softmax;
pub mod split_sums;

families! {
    GetRows(get_rows::GetRows),
    MatVec(matvec::MatVec),
    MatVecBlocks(matvec_blocks::MatVecBlocks),
    MatMul(matmul::MatMul),
    MatQ8(matmul_q8::MatQ8),
    MatMulCoop(matmul_coop::MatMulCoop),
    MatMulId(matmul_id::MatMulId),
    Moe(moe::MoeKernel),
    SplitSums(split_sums::SplitSums),
    Norm(norm::Norm),
    NormHalf(norm_half::AddRmsNormHalf),
    NormRope(norm_rope::NormRope),
    Rope(rope::RopeKernel),
    Attention(attention::AttentionKernel),
    AttentionCoop(attention_coop::AttentionCoop),
    Elementwise(elementwise::ElementwiseKernel),
    Softmax(softmax::SoftmaxKernel),
    Copy(copy::CopyKernel),
    KvStore(kv_store::KvStore),
    Quantize(quantize::QuantizeActs),
}

/// A kernel family: the type of its variants.
pub trait Family: Copy + Into<Kernel> {
    /// Its parameter block, declared in its WGSL as `struct Params`.
    type Params: KernelParams;

    /// Every variant, for the naga/Metal test.
    fn all() -> Vec<Self>;

    /// Whether the variant exists for these adapter features.
    fn builds_with(self, _f: ShaderFeatures) -> bool {
        true
    }

    /// The storage bindings after the parameter block, from binding 1 on.
    fn bindings(self) -> &'static [Binding];

    /// Its WGSL: the files after common.wgsl and their defines.
    fn source(self, f: ShaderFeatures, s: &mut Source);
}

/// A parameter block (binding 0): one 64-byte uniform slot per dispatch.
pub trait KernelParams: bytemuck::Pod {
    /// Its fields in order, as the WGSL declares them.
    const FIELDS: &'static [Field];
}

/// One field of a parameter block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

/// Bytes of one dispatch's parameter slot: the largest block (the
/// attention's 17 words) rounded up to 16.
pub const PARAMS_BYTES: u64 = 80;

/// A dispatch's parameter block as the recorder writes it.
pub type ParamBlock = [u32; PARAMS_BYTES as usize / 4];

/// How a kernel's storage binding is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// A storage binding: its name in the WGSL and its access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: &'static str,
    pub access: Access,
}

/// A read-only binding (the driver may use its read-only cache).
pub const fn r(name: &'static str) -> Binding {
    Binding {
        name,
        access: Access::Read,
    }
}

/// A read-write binding.
pub const fn rw(name: &'static str) -> Binding {
    Binding {
        name,
        access: Access::ReadWrite,
    }
}

/// One dispatch: a kernel, its parameter block, the tensors it binds in
/// binding order, and its workgroups.
#[derive(Clone, Debug)]
pub struct Dispatch {
    pub kernel: Kernel,
    pub params: ParamBlock,
    pub bound: Vec<Tensor>,
    pub groups: u64,
    /// An output it writes whole without reading (`Dispatch::writing`),
    /// for the fusion pass's liveness (`fuse::live`); None where no one
    /// said, which counts every bound tensor as read.
    pub whole: Option<Tensor>,
}

impl Dispatch {
    /// `kernel` over `groups` workgroups with `params`, binding `tensors`
    /// by the names of its bindings (each exactly once, in any order).
    pub fn new<F: Family>(
        kernel: F,
        params: F::Params,
        tensors: &[(&str, Tensor)],
        groups: u64,
    ) -> Dispatch {
        let kernel: Kernel = kernel.into();
        let slots = kernel.bindings();
        // A builder naming other bindings than its kernel's is a bug the
        // dispatch tests catch (`every_dispatch_binds_its_kernels_bindings`).
        assert_eq!(
            tensors.len(),
            slots.len(),
            "{kernel:?}: {} tensors for {} bindings",
            tensors.len(),
            slots.len()
        );
        let bound = slots
            .iter()
            .map(|b| match tensors.iter().find(|(name, _)| *name == b.name) {
                Some(&(_, t)) => t,
                None => panic!("{kernel:?} binds no tensor as `{}`", b.name),
            })
            .collect();
        let mut block = ParamBlock::default();
        let bytes = bytemuck::bytes_of(&params);
        bytemuck::cast_slice_mut::<u32, u8>(&mut block)[..bytes.len()].copy_from_slice(bytes);
        Dispatch {
            kernel,
            params: block,
            bound,
            groups,
            whole: None,
        }
    }

    /// The dispatch, saying that it writes all of `out` (bound once) and
    /// reads none of it.
    pub fn writing(self, out: Tensor) -> Dispatch {
        Dispatch {
            whole: Some(out),
            ..self
        }
    }
}

/// Tensors a dispatch may bind besides its own: a small buffer where an
/// optional input is absent, and exact.wgsl's tables (`tables.rs`).
#[derive(Clone, Copy)]
pub struct Aux {
    pub dummy: Tensor,
    pub tables: Tensor,
}

/// Adapter capabilities a kernel may be built for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ShaderFeatures {
    /// Subgroup reductions (`subgroupAdd`, `subgroupMax`).
    pub subgroups: bool,
    /// Native `f16` (WGSL `enable f16;`) for unpacking f16 words.
    pub shader_f16: bool,
    /// `fma` rounds once (probed on the device: lavapipe's does not);
    /// otherwise exact.wgsl emulates it.
    pub fused_fma: bool,
    /// Plain hardware arithmetic (exact.wgsl's FAST): with f32 activations
    /// nothing follows ggml's CPU rounding.
    pub fast_math: bool,
    /// Cooperative matrices of this size (16 or 8) with f16 operands and
    /// f32 sums, and subgroups of 32; 0 without.
    pub coop: u32,
}

impl ShaderFeatures {
    /// Whether weights of type `t` are uploaded repacked into superblocks
    /// (`buffers::repack`; quant.wgsl's REPACKED): Q4_0 and Q8_0 in the
    /// f32-activation mode, whose kernels then load aligned 16-byte words.
    /// ggml's mode reads the GGUF layout.
    pub fn repacks(self, t: GgmlType) -> bool {
        self.fast_math && matches!(t, GgmlType::Q4_0 | GgmlType::Q8_0)
    }

    /// Whether decode mat-vecs of weights of type `t` run on Q8-rounded
    /// activations with integer dot products (`matvec_blocks`): the
    /// repacked types and those it reads in their GGUF layout, in the
    /// f32-activation mode.
    pub fn dots(self, t: GgmlType) -> bool {
        self.fast_math && matvec_blocks::DOT_TYPES.contains(&t)
    }

    /// The prefill tile of `matmul_coop.wgsl` (rows × tokens) for these
    /// features.
    pub fn coop_tile(self, tile: matmul_coop::CoopTile) -> (usize, usize) {
        tile.size(self.coop)
    }
}

/// Weight types the matmul and get_rows kernels decode.
pub const WEIGHT_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
];

/// Workgroup size of the kernels that reduce a row across a workgroup
/// (reduce.wgsl's `RED_WG`), and the default.
pub const WG_ROW: u32 = 256;

/// The shared files, included by the families that use them.
pub mod shared {
    /// The workgroup index, f16 rounding, the blocked f16 layout.
    pub const COMMON: &str = include_str!("common.wgsl");
    /// Workgroup reductions (subgroups where the adapter has them).
    pub const REDUCE: &str = include_str!("reduce.wgsl");
    /// Weight blocks decoded in registers.
    pub const QUANT: &str = include_str!("quant.wgsl");
    /// ggml's CPU rounding: fused multiply-adds, correctly rounded maths.
    pub const EXACT: &str = include_str!("exact.wgsl");
    /// RoPE's rotation of a pair.
    pub const ROTATE: &str = include_str!("rotate.wgsl");
    /// Loads and stores of a kernel's first or second (PAIR) tensor.
    pub const PAIR_IO: &str = include_str!("pair_io.wgsl");
    /// A mat-vec workgroup's sweep over its weight rows (after QUANT and
    /// REDUCE).
    pub const MATVEC_ROWS: &str = include_str!("matvec_rows.wgsl");
    /// Legacy-quant blocks as ggml's integer lanes (after QUANT).
    pub const Q8_LANES: &str = include_str!("q8_lanes.wgsl");
}

/// A kernel's WGSL as it is put together: the embedded files in order and
/// the defines the preprocessor applies to them.
pub struct Source {
    parts: Vec<&'static str>,
    defines: Vec<(&'static str, String)>,
    /// The workgroup size (`{{WG}}`).
    pub wg: u32,
    /// Whether it uses cooperative matrices.
    pub coop: bool,
}

impl Source {
    /// Defines `name` (for `#ifdef`).
    pub fn def(&mut self, name: &'static str) {
        self.defines.push((name, String::new()));
    }

    /// Defines `name` as `value` (for `{{name}}`).
    pub fn set(&mut self, name: &'static str, value: impl ToString) {
        self.defines.push((name, value.to_string()));
    }

    /// Appends embedded files, in order.
    pub fn include(&mut self, parts: &[&'static str]) {
        self.parts.extend_from_slice(parts);
    }

    /// Defines `name` as the binding number of `binding` in `bindings`.
    pub fn binding(&mut self, name: &'static str, binding: &str, bindings: &[Binding]) {
        match bindings.iter().position(|b| b.name == binding) {
            Some(i) => self.set(name, i + 1),
            None => panic!("no binding `{binding}` for {name}"),
        }
    }

    /// exact.wgsl's tables, bound as `tab` (TABLES, TAB).
    pub fn tables(&mut self, bindings: &[Binding]) {
        self.def("TABLES");
        self.binding("TAB", "tab", bindings);
    }

    /// quant.wgsl's defines for weights of type `t`: its TYPE_ define and
    /// class, REPACKED where the features repack it (`repacks`), and WQ,
    /// the type its words are read as: `f16` for F16 weights with
    /// shader-f16 (`f16_words`), pairs of words for the coop GEMM of a
    /// repacked type (`pairs`), `u32` otherwise.
    pub fn weights(&mut self, t: GgmlType, repacked: bool, f16_words: bool, pairs: bool) {
        self.weight_type(t);
        if repacked {
            self.def("REPACKED");
        }
        if f16_words {
            self.def("WQ_F16");
        }
        if pairs {
            self.def("WQ_PAIRS");
        }
        let wq = match (f16_words, pairs) {
            (true, _) => "f16",
            (false, true) => "vec2<u32>",
            (false, false) => "u32",
        };
        self.set("WQ", wq);
    }

    /// The TYPE_ define of weight type `t`, and its class (PLAIN for
    /// floats, CODEBOOK for the tables of levels, K_SCALES for Q4_K and
    /// Q5_K).
    pub fn weight_type(&mut self, t: GgmlType) {
        use GgmlType::*;
        self.def(match t {
            F32 => "TYPE_F32",
            F16 => "TYPE_F16",
            BF16 => "TYPE_BF16",
            Q4_0 => "TYPE_Q4_0",
            Q4_1 => "TYPE_Q4_1",
            Q5_0 => "TYPE_Q5_0",
            Q5_1 => "TYPE_Q5_1",
            Q8_0 => "TYPE_Q8_0",
            Q2_K => "TYPE_Q2_K",
            Q3_K => "TYPE_Q3_K",
            Q4_K => "TYPE_Q4_K",
            Q5_K => "TYPE_Q5_K",
            Q6_K => "TYPE_Q6_K",
            IQ4_NL => "TYPE_IQ4_NL",
            IQ4_XS => "TYPE_IQ4_XS",
            MXFP4 => "TYPE_MXFP4",
            // Callers check `supports` first; an unknown type builds nothing
            // that naga would accept, so the error surfaces at pipeline build.
            _ => "TYPE_UNSUPPORTED",
        });
        match t {
            F32 | F16 | BF16 => self.def("PLAIN"),
            IQ4_NL | IQ4_XS | MXFP4 => self.def("CODEBOOK"),
            Q4_K | Q5_K => self.def("K_SCALES"),
            _ => {}
        }
    }

    /// How the cooperative kernels stage f16 tiles in workgroup memory: V
    /// halves an element of type LT (LV4: vec4<f16>). Metal's simdgroup
    /// loads (fragments of 8) take scalar pointers.
    pub fn coop_staging(&mut self, fs: u32) {
        let v = if fs == 8 { 1 } else { 4 };
        self.set("V", v);
        self.set("LT", if v == 4 { "vec4<f16>" } else { "f16" });
        if v == 4 {
            self.def("LV4");
        }
    }

    /// The full WGSL text.
    fn text(mut self, f: ShaderFeatures) -> String {
        self.set("WG", self.wg);
        let mut out = String::new();
        if f.shader_f16 {
            // Enable directives must come before any declaration.
            out.push_str("enable f16;\n");
        }
        if self.coop {
            out.push_str("enable wgpu_cooperative_matrix;\n");
        }
        for p in &self.parts {
            out.push_str(&super::pipelines::preprocess(p, &self.defines));
            out.push('\n');
        }
        out
    }
}

impl Kernel {
    /// A short name for labels and the perf table.
    pub fn label(self) -> String {
        format!("{self:?}")
    }

    /// The kernel's full WGSL source for these features: common.wgsl, then
    /// the family's files with the features' defines and its own.
    pub fn source(self, f: ShaderFeatures) -> String {
        let mut s = Source {
            parts: vec![shared::COMMON],
            defines: Vec::new(),
            wg: WG_ROW,
            coop: false,
        };
        if f.subgroups {
            s.def("SUBGROUPS");
        }
        if f.fused_fma {
            s.def("FUSED_FMA");
        }
        if f.fast_math {
            s.def("FAST");
        }
        self.family_source(f, &mut s);
        s.text(f)
    }
}

#[cfg(test)]
mod tests;
