//! Prefill attention on cooperative matrices (`attention_coop.wgsl`), an
//! F16 cache: a workgroup per block of FS rows of the query heads that
//! share a KV head, a subgroup per head, the scores and P·V as fragments.

use crate::backend::Tensor;

use super::attention::{self, KEYS, Operands, Params};
use super::{Aux, Binding, Dispatch, Family, ShaderFeatures, Source, r, rw};

const SOURCE: &str = include_str!("attention_coop.wgsl");

/// Head sizes it is built for: its outputs and queries are HD / FS
/// fragments each, held in registers.
pub const COOP_ATTENTION_HEAD_DIMS: [u32; 2] = [64, 128];

/// A workgroup per (`heads` query heads of one KV head, block of FS rows),
/// heads of `head_dim` (`COOP_ATTENTION_HEAD_DIMS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionCoop {
    pub head_dim: u32,
    pub heads: u32,
    /// Its output also as the next coop matmul's f16 blocks.
    pub half: bool,
}

impl Family for AttentionCoop {
    type Params = Params;

    fn all() -> Vec<Self> {
        let mut v = Vec::new();
        for head_dim in COOP_ATTENTION_HEAD_DIMS {
            for heads in [1, 2] {
                for half in [false, true] {
                    v.push(AttentionCoop {
                        head_dim,
                        heads,
                        half,
                    });
                }
            }
        }
        v
    }

    fn builds_with(self, f: ShaderFeatures) -> bool {
        f.coop != 0 && f.shader_f16 && f.subgroups && f.fast_math
    }

    fn bindings(self) -> &'static [Binding] {
        // As attention.wgsl's (the tables bound, not read), and the f16
        // blocks after them.
        const ONE: [Binding; 7] = [
            rw("q"),
            r("kc"),
            r("vc"),
            rw("pos"),
            rw("seq"),
            rw("out"),
            r("tab"),
        ];
        if self.half {
            &const {
                [
                    ONE[0],
                    ONE[1],
                    ONE[2],
                    ONE[3],
                    ONE[4],
                    ONE[5],
                    ONE[6],
                    rw("halves"),
                ]
            }
        } else {
            &ONE
        }
    }

    fn source(self, f: ShaderFeatures, s: &mut Source) {
        if self.half {
            s.def("HALF");
        }
        s.set("HD", self.head_dim);
        s.set("FS", f.coop);
        s.set("SQ", self.heads);
        s.coop_staging(f.coop);
        for (name, code) in fragment_code(f.coop, self.head_dim) {
            s.set(name, code);
        }
        s.include(&[KEYS, SOURCE]);
        s.coop = true;
    }
}

/// The query heads of one KV head that a workgroup takes (sharing its
/// staged keys and values): 2 where they divide the heads of a group
/// (4 were no faster, with half the workgroups; 1 took about twice as
/// long).
pub fn coop_attention_heads(n_heads: usize, n_kv_heads: usize) -> u32 {
    let group = n_heads / n_kv_heads.max(1);
    if group.is_multiple_of(2) { 2 } else { 1 }
}

/// The fragments as variables, HD / FS of each: the queries (`qa{d}`,
/// loaded once), one block's scores (`s`, summed over them), the outputs
/// (`o{d}`), one block's P·V into them, and their stores.
fn fragment_code(fs: u32, hd: u32) -> [(&'static str, String); 6] {
    let mut q = String::new();
    let mut s = String::new();
    let mut decl = String::new();
    let mut step = String::new();
    let mut out = String::new();
    let mut rescale = String::new();
    for d in 0..hd / fs {
        q += &format!("    let qa{d} = query_frag(sg, {d}u);\n");
        let acc = if d == 0 { "zero" } else { "s" };
        let v = if d == 0 { "var s =" } else { "s =" };
        s += &format!("        {v} coopMultiplyAdd(key_frag(kb, {d}u), qa{d}, {acc});\n");
        decl += &format!("    var o{d}: coop_mat{fs}x{fs}<f32, C>;\n");
        step += &format!("        o{d} = coopMultiplyAdd(pa, value_frag(kb, {d}u), o{d});\n");
        rescale += &format!(
            "            coopStoreT(o{d}, &ss[sb], FS);\n            rescale(sb, k0, r, corr);\n            o{d} = coopLoadT<coop_mat{fs}x{fs}<f32, C>>(&ss[sb], FS);\n"
        );
        out += &format!(
            "    coopStoreT(o{d}, &ss[sb], FS);\n    emit({d}u, sb, ob, k0, r, inv, live && i0 + r < n);\n"
        );
    }
    [
        ("Q_DECL", q),
        ("S_STEP", s),
        ("O_DECL", decl),
        ("O_STEP", step),
        ("O_RESCALE", rescale),
        ("O_OUT", out),
    ]
}

/// Prefill attention on cooperative matrices, a step of the tape
/// (`Step::CoopAttention`): its kernel's head size and heads a
/// workgroup, its tensors, parameters and workgroups.
#[derive(Clone, Copy)]
pub struct CoopAttention {
    pub head_dim: u32,
    pub heads: u32,
    pub t: Operands,
    pub params: attention::Params,
    pub groups: u64,
}

impl CoopAttention {
    /// Its dispatch, with `half` (the next matmul's f16 blocks) written
    /// too.
    pub fn call(self, half: Option<Tensor>, aux: Aux) -> Dispatch {
        let kernel = AttentionCoop {
            head_dim: self.head_dim,
            heads: self.heads,
            half: half.is_some(),
        };
        let [q, kc, vc, pos, seq, out] = self.t;
        let mut bound = vec![
            ("q", q),
            ("kc", kc),
            ("vc", vc),
            ("pos", pos),
            ("seq", seq),
            ("out", out),
            ("tab", aux.tables),
        ];
        bound.extend(half.map(|h| ("halves", h)));
        Dispatch::new(kernel, self.params, &bound, self.groups)
    }
}
