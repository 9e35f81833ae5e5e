//! What an op asks of the GPU: dispatches of a kernel with a parameter
//! block and bindings, fixed when the graph is compiled.
//!
//! Binding convention of every kernel: `@binding(0)` is the parameter
//! uniform (when the kernel has one), then the storage bindings in the
//! order of `Dispatch::binds`. A 1-D kernel's invocation `i` is
//! `gid.x + gid.y · nwg.x · WG` (`common.wgsl`'s `flat`), so that more than
//! 65535 workgroups fit.

/// The kernel sources, embedded: one file per op family, variants by
/// `#ifdef` defines and `{{NAME}}` values (smelt's preprocessor).
pub const FILES: &[(&str, &str)] = &[
    ("reduce", include_str!("kernels/reduce.wgsl")),
    ("matmul", include_str!("kernels/matmul.wgsl")),
    ("conv", include_str!("kernels/conv.wgsl")),
    ("pool", include_str!("kernels/pool.wgsl")),
    ("softmax", include_str!("kernels/softmax.wgsl")),
    ("embed", include_str!("kernels/embed.wgsl")),
    ("rnn", include_str!("kernels/rnn.wgsl")),
    ("optim", include_str!("kernels/optim.wgsl")),
];

pub const COMMON: &str = include_str!("kernels/common.wgsl");
pub const MATH: &str = include_str!("kernels/math.wgsl");

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    File(&'static str),
    /// A fused map's generated code (`map_wgsl`).
    Generated(String),
}

/// A kernel variant: its source and defines.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub source: Source,
    pub defines: Vec<(&'static str, String)>,
}

impl Kernel {
    pub fn new(file: &'static str, defines: &[&'static str]) -> Self {
        Kernel {
            source: Source::File(file),
            defines: defines.iter().map(|d| (*d, String::new())).collect(),
        }
    }

    /// A variant with valued defines (`{{NAME}}` in the source).
    pub fn with_values(file: &'static str, defines: &[(&'static str, String)]) -> Self {
        Kernel {
            source: Source::File(file),
            defines: defines.to_vec(),
        }
    }

    pub fn generated(text: String) -> Self {
        Kernel {
            source: Source::Generated(text),
            defines: Vec::new(),
        }
    }

    /// The full WGSL text.
    pub fn text(&self) -> String {
        let body = match &self.source {
            Source::File(name) => {
                let (_, text) = FILES
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no kernel file {name}"));
                smelt::backend::gpu::preprocess(text, &self.defines)
            }
            Source::Generated(text) => text.clone(),
        };
        format!("{COMMON}\n{MATH}\n{body}")
    }

    pub fn label(&self) -> String {
        match &self.source {
            Source::File(name) => {
                let d: Vec<&str> = self.defines.iter().map(|(n, _)| *n).collect();
                format!("{name}[{}]", d.join(","))
            }
            Source::Generated(_) => "map".into(),
        }
    }
}

/// A storage binding: an input or output of the node, the run state
/// (`[step, seed, pad, pad, bias corrections…]`, written before each run),
/// or the scratch buffer an op's dispatches pass partial results through
/// (one buffer shared by every op: its contents live only from one
/// dispatch of an op to the next of the same op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bind {
    In(usize),
    Out(usize),
    Run,
    Scratch,
}

#[derive(Clone, Debug)]
pub struct Dispatch {
    pub kernel: Kernel,
    /// The parameter block (`@binding(0)`), empty for none.
    pub params: Vec<u8>,
    pub binds: Vec<Bind>,
    pub groups: [u32; 3],
    /// Elements of scratch the dispatch needs (`Bind::Scratch`).
    pub scratch: usize,
}

impl Dispatch {
    pub fn new(kernel: Kernel, params: &[u8], binds: Vec<Bind>, groups: [u32; 3]) -> Self {
        Dispatch {
            kernel,
            params: params.to_vec(),
            binds,
            groups,
            scratch: 0,
        }
    }
}

/// The largest workgroup count of one dimension WebGPU guarantees.
const MAX_GROUPS: usize = 65535;

/// Workgroups of `wg` invocations for `threads` 1-D invocations.
pub fn groups_1d(threads: usize, wg: usize) -> [u32; 3] {
    let groups = threads.div_ceil(wg).max(1);
    if groups <= MAX_GROUPS {
        [groups as u32, 1, 1]
    } else {
        [MAX_GROUPS as u32, groups.div_ceil(MAX_GROUPS) as u32, 1]
    }
}
