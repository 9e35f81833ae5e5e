//! Every dispatch builder binds exactly its kernel's bindings
//! (`Dispatch::new` checks the names) and builds the kernel it says, with
//! the coop builders that lavapipe never runs among them.

use crate::backend::{AttentionParams, RopeMode, RopeParams, Tensor};
use crate::quant::GgmlType::{self, F16, F32, Q4_0};

use super::attention::{self, AttentionKernel, RopeJoin};
use super::attention_coop::{AttentionCoop, CoopAttention};
use super::elementwise::{self, Elementwise, ElementwiseKernel};
use super::matmul_coop::{self, CoopGateUp, CoopTile, MatMulCoop, Multi};
use super::matvec_blocks::{self, DotIn, MatVecBlocks, NormJoin};
use super::norm::{self, AddNorm, Norm};
use super::norm_half::AddRmsNormHalf;
use super::split_sums::{Split, SplitSums};
use super::*;

/// A tensor handle of its own id.
fn t(id: u32, dtype: GgmlType, rows: usize, cols: usize) -> Tensor {
    Tensor {
        id,
        dtype,
        rows,
        cols,
    }
}

fn aux() -> Aux {
    Aux {
        dummy: t(900, F32, 1, 4),
        tables: t(901, F32, 1, 64),
    }
}

#[test]
fn matmul_builders_bind_their_kernels() {
    let (w, x, out) = (t(1, Q4_0, 64, 256), t(2, F32, 8, 256), t(3, F32, 8, 64));
    let q8 = [
        t(4, GgmlType::I32, 1, 512),
        t(5, F32, 1, 64),
        t(6, F32, 1, 64),
    ];
    let d = matmul::dispatch(w, x, out, 0, 144);
    assert_eq!(d.kernel, Kernel::MatMul(matmul::MatMul(Q4_0)));
    assert_eq!(d.bound, [w, x, out]);
    let d = matvec::dispatch(w, x, out, 0, 144);
    assert_eq!(d.kernel, Kernel::MatVec(matvec::MatVec(Q4_0)));
    let d = matmul_q8::dispatch(w, q8, out, (0, 144), true);
    assert_eq!(d.kernel, Kernel::MatQ8(matmul_q8::MatQ8::MatVecQ8(Q4_0)));
    assert_eq!(d.bound.len(), 4);
    let w1 = t(7, GgmlType::Q4_1, 64, 256);
    let d = matmul_q8::dispatch(w1, q8, out, (0, 144), false);
    assert_eq!(d.bound, [w1, q8[0], q8[1], out, q8[2]]);
    let d = matvec_blocks::dot((w, q8, out), 0, Some((x, x)));
    let dot = MatVecBlocks::MatVecDot {
        t: Q4_0,
        residual: true,
        rows16: false,
    };
    assert_eq!(d.kernel, Kernel::MatVecBlocks(dot));
    // K-quant rows of few units in a weight of many rows: 16 rows a
    // workgroup; in fewer rows, 4.
    for (m, rows16) in [(16384, true), (4096, false)] {
        let wk = t(9, GgmlType::Q4_K, m, 256);
        let d = matvec_blocks::dot((wk, q8, out), 0, None);
        let want = MatVecBlocks::MatVecDot {
            t: GgmlType::Q4_K,
            residual: false,
            rows16,
        };
        assert_eq!(d.kernel, Kernel::MatVecBlocks(want));
        // Workgroups per token (out has 8 rows).
        assert_eq!(d.groups, 8 * m as u64 / if rows16 { 16 } else { 4 });
    }
    let norm = DotIn::Norm(NormJoin {
        x,
        w: t(8, F32, 1, 256),
        eps: 1e-5,
        out: x,
    });
    for input in [DotIn::Q8([q8[0], q8[1]]), norm] {
        matvec_blocks::multi(&[w, w, w], input, &[out, out, out], 1);
        matvec_blocks::multi(&[w, w], input, &[out, out], 1);
        for q in [None, Some(q8)] {
            let op = (Elementwise::SiluMul, out);
            matvec_blocks::gate_up_glu(([w, w], input, [out, out]), op, q, aux());
        }
    }
}

#[test]
fn moe_builders_bind_their_kernels() {
    use super::matmul_id::{Experts, MatMulId};
    use super::moe::MoeKernel;
    use crate::backend::{MoeGating, MoeParams};
    // 4 experts of 64 × 256, 3 tokens of 2 experts each.
    let (x, ids, out) = (
        t(2, F32, 3, 256),
        t(3, GgmlType::I32, 3, 2),
        t(4, F32, 6, 64),
    );
    let q8 = [
        t(5, GgmlType::I32, 1, 192),
        t(6, F32, 1, 24),
        t(7, F32, 1, 24),
    ];
    for w in [t(1, Q4_0, 256, 256), t(1, GgmlType::Q4_1, 256, 256)] {
        let e = Experts {
            w,
            row_bytes: 144,
            n_expert: 4,
            ids,
            out,
        };
        let d = matmul_id::f32s(e, x);
        assert_eq!(d.kernel, Kernel::MatMulId(MatMulId::MatVecId(w.dtype)));
        assert_eq!(d.bound, [w, x, ids, out]);
        assert_eq!(d.groups, 16 * 6);
        let d = matmul_id::q8(e, q8, 3);
        assert_eq!(d.kernel, Kernel::MatMulId(MatMulId::MatVecIdQ8(w.dtype)));
        assert_eq!(d.groups, 4 * 6);
        let d = matvec_blocks::dot_id(e, q8, 3);
        let dot = MatVecBlocks::MatVecDotId { t: w.dtype };
        assert_eq!(d.kernel, Kernel::MatVecBlocks(dot));
        assert_eq!(d.bound, [w, q8[0], q8[1], out, ids]);
    }
    let logits = t(8, F32, 3, 4);
    for gating in [MoeGating::Softmax, MoeGating::SoftmaxWeight] {
        let p = MoeParams {
            k: 2,
            gating,
            normalize: true,
        };
        let d = moe::topk(logits, &p, ids, t(9, F32, 3, 2), aux());
        assert_eq!(d.kernel, Kernel::Moe(MoeKernel::TopK(gating)));
        assert_eq!(d.groups, 3);
    }
    let d = moe::sum(out, t(9, F32, 3, 2), t(10, F32, 3, 64));
    assert_eq!(d.kernel, Kernel::Moe(MoeKernel::Sum));
}

#[test]
fn coop_builders_bind_their_kernels() {
    let (w, half, out) = (
        t(1, Q4_0, 4096, 4096),
        t(2, F16, 512, 4096),
        t(3, F32, 512, 4096),
    );
    let sums = t(4, F32, 512, 4096);
    let split = [
        (CoopTile::Wide, None),
        (CoopTile::HugeSplit, Some((sums, 2))),
        (CoopTile::ShortSplit, Some((sums, 8))),
    ];
    for (tile, sums) in split {
        let d = matmul_coop::one((w, half, out), (0, 128), (tile, 16), sums);
        let multi = Multi::One;
        assert_eq!(
            d.kernel,
            Kernel::MatMulCoop(MatMulCoop {
                t: Q4_0,
                tile,
                multi
            })
        );
    }
    let (ws, outs) = ([w, w, w], [out, out, out]);
    for n in [2, 3] {
        let joint = Some((t(5, Q4_0, 1, 1), (0..n as u32).map(|i| 8 * i).collect()));
        for joint in [None, joint] {
            let multi = if joint.is_some() {
                Multi::Joint
            } else {
                Multi::Apart
            };
            let (tile, w3) = ((CoopTile::Slim, 16), (&ws[..n], half, &outs[..n]));
            let d = matmul_coop::multi(w3, tile, 128, joint);
            let k = MatMulCoop {
                t: Q4_0,
                tile: CoopTile::Slim,
                multi,
            };
            assert_eq!(d.kernel, Kernel::MatMulCoop(k));
        }
    }
    let g = CoopGateUp {
        w: [w, w],
        joint: (t(5, Q4_0, 1, 1), [0, 64]),
        x: half,
        outs: [out, out],
        glu: None,
        keep: true,
        tile: (128, 256),
        row_bytes: 128,
    };
    for glu in [None, Some((Elementwise::GeluMul, out))] {
        for h in [None, Some(half)] {
            let d = CoopGateUp { glu, ..g }.call(h, aux());
            let op = glu.map_or(Elementwise::SiluMul, |(op, _)| op);
            let k = MatMulCoop {
                t: Q4_0,
                tile: CoopTile::Huge,
                multi: Multi::Glu(op),
            };
            assert_eq!(d.kernel, Kernel::MatMulCoop(k));
        }
    }
    let p = AttentionParams::new(32, 8, 128, 512);
    let at = [
        out,
        t(6, F16, 512, 1024),
        t(7, F16, 512, 1024),
        t(8, GgmlType::I32, 1, 512),
        t(9, GgmlType::I32, 1, 512),
        out,
    ];
    let a = CoopAttention {
        head_dim: 128,
        heads: 2,
        t: at,
        params: attention::Params::new(512, &p, 512),
        groups: 64,
    };
    for h in [None, Some(half)] {
        let d = a.call(h, aux());
        let k = AttentionCoop {
            head_dim: 128,
            heads: 2,
            half: h.is_some(),
        };
        assert_eq!(d.kernel, Kernel::AttentionCoop(k));
    }
}

#[test]
fn fused_builders_bind_their_kernels() {
    let (x, out, w) = (t(1, F32, 4, 64), t(2, F32, 4, 64), t(3, F32, 1, 64));
    let q8 = [t(4, GgmlType::I32, 1, 64), t(5, F32, 1, 8), t(6, F32, 1, 8)];
    let d = norm::rms_norm(x, Some(w), 1e-5, out, Some(q8));
    assert_eq!(d.kernel, Kernel::Norm(Norm::RmsNormQ8));
    let d = norm::rms_norm(x, None, 1e-5, out, None);
    assert_eq!(d.kernel, Kernel::Norm(Norm::RmsNorm { weight: false }));
    let split = Split {
        out: x,
        sums: t(7, F32, 4, 64),
        parts: 2,
        keep: false,
    };
    assert_eq!(split.call().kernel, Kernel::SplitSums(SplitSums));
    let add = AddNorm {
        a: x,
        b: x,
        sum: x,
        w,
        eps: 1e-5,
        out,
        split: None,
    };
    assert_eq!(add.call(None).kernel, Kernel::Norm(Norm::AddRmsNorm));
    for split in [None, Some(split)] {
        let d = AddNorm { split, ..add }.call(Some(t(8, F16, 4, 64)));
        let k = AddRmsNormHalf {
            sums: split.is_some(),
        };
        assert_eq!(d.kernel, Kernel::NormHalf(k));
        assert_eq!(d.params[3], u32::from(split.is_some_and(|s| s.keep)));
    }
    let op = Elementwise::SiluMul;
    let d = elementwise::glu_q8(op, (x, x, out), q8);
    assert_eq!(d.kernel, Kernel::Elementwise(ElementwiseKernel::GluQ8(op)));
    let d = elementwise::glu_half(op, (x, x, out), t(8, F16, 4, 64));
    assert_eq!(
        d.kernel,
        Kernel::Elementwise(ElementwiseKernel::GluHalf(op))
    );
    let d = elementwise::dispatch(Elementwise::Scale, x, None, 2.0, out);
    assert_eq!(d.bound, [x, out]);
}

#[test]
fn rope_and_attention_builders_bind_their_kernels() {
    let (q, k, v) = (t(1, F32, 1, 512), t(2, F32, 1, 128), t(3, F32, 1, 128));
    let (pos, ids, kc, vc) = (
        t(4, GgmlType::I32, 1, 1),
        t(5, GgmlType::I32, 1, 1),
        t(6, F16, 64, 128),
        t(7, F16, 64, 128),
    );
    let p = RopeParams {
        mode: RopeMode::Normal,
        n_heads: 8,
        head_dim: 64,
        n_dims: 64,
        freq_base: 10000.0,
        freq_scale: 1.0,
        freq_factors: None,
        attn_factor: 1.0,
    };
    let d = rope::rope((q, pos, &p, q), Some((k, 2, k)), aux());
    assert_eq!(
        d.kernel,
        Kernel::Rope(rope::RopeKernel::RopePair(RopeMode::Normal))
    );
    for vv in [None, Some((v, vc))] {
        let d = rope::rope_store(((q, q), (k, k, 2), pos, &p), (ids, kc), vv, aux());
        assert_eq!(d.kernel, Kernel::Rope(rope::RopeKernel::RopeStore(F16)));
    }
    let d = copy::set_rows((k, ids, kc), Some((v, vc)));
    assert_eq!(d.kernel, Kernel::Copy(copy::CopyKernel::SetRowsPair(F16)));
    let out = t(8, F32, 1, 512);
    let at = [q, kc, vc, pos, t(9, GgmlType::I32, 1, 1), out];
    let ap = AttentionParams::new(8, 2, 64, 64);
    let params = attention::Params::new(1, &ap, 64);
    let q8 = [
        t(10, GgmlType::I32, 1, 128),
        t(11, F32, 1, 16),
        t(12, F32, 1, 16),
    ];
    let d = attention::with_q8(at, params, 8, q8, aux());
    assert_eq!(
        d.kernel,
        Kernel::Attention(AttentionKernel::AttentionQ8(F16))
    );
    let join = RopeJoin {
        keep_q: true,
        x: q,
        k: (k, Some(k)),
        v,
        ids,
        p,
    };
    for q8 in [None, Some(q8)] {
        let d = attention::with_rope((at, params, 8), join, q8, aux());
        assert_eq!(
            d.kernel,
            Kernel::Attention(AttentionKernel::AttentionRope(F16))
        );
        assert_eq!(
            d.params[13],
            u32::from(q8.is_some()) + attention::KEEP_K + attention::KEEP_Q
        );
    }
    // Split over the keys: the parts (the rope's bindings, the parts
    // buffer where the output was), then the merge, rounding with q8.
    let parts = attention::Parts {
        n: 4,
        buffer: t(20, F32, 1, 8 * 4 * 66),
    };
    for (rope, q8) in [(None, None), (Some(join), Some(q8))] {
        let [first, merge] = attention::split((at, params, 8), parts, rope, q8, aux());
        let want = AttentionKernel::AttentionParts {
            kv: F16,
            rope: rope.is_some(),
            parts: 4,
        };
        assert_eq!(first.kernel, Kernel::Attention(want));
        assert_eq!(first.groups, 32);
        assert!(first.bound.contains(&parts.buffer) && !first.bound.contains(&out));
        let want = AttentionKernel::AttentionMerge {
            q8: q8.is_some(),
            parts: 4,
        };
        assert_eq!(merge.kernel, Kernel::Attention(want));
        assert_eq!(
            (merge.groups, merge.bound[..2].to_vec()),
            (8, vec![parts.buffer, out])
        );
    }
}

#[test]
fn decode_attention_splits_long_rows_of_keys_over_few_heads() {
    use attention::parts_for;
    // 32 heads of one row: 4 parts once each has 2 chunks of 128 keys.
    assert_eq!(parts_for(32, 0), 1);
    assert_eq!(parts_for(32, 383), 1);
    assert_eq!(parts_for(32, 512), 2);
    assert_eq!(parts_for(32, 1024), 4);
    assert_eq!(parts_for(32, 100_000), 4);
    // Fewer heads take more parts; 64 workgroups or more, none.
    assert_eq!(parts_for(4, 100_000), 8);
    assert_eq!(parts_for(24, 4096), 4);
    assert_eq!(parts_for(64, 100_000), 1);
}

#[test]
fn a_dispatch_params_block_is_its_struct() {
    // Bytes as the struct lays them out, the rest of the slot zero.
    let d = softmax::dispatch(
        softmax::SoftmaxKernel::Argmax,
        t(1, F32, 3, 7),
        t(2, GgmlType::I32, 1, 3),
    );
    assert_eq!(d.params[..3], [3, 7, 0]);
    let d = elementwise::dispatch(
        Elementwise::Scale,
        t(1, F32, 2, 5),
        None,
        0.5,
        t(2, F32, 2, 5),
    );
    assert_eq!(f32::from_bits(d.params[2]), 0.5);
    assert!(d.params[4..].iter().all(|&w| w == 0));
}
