//! The mixture-of-experts ops on the GPU: routing (`topk_moe`), the
//! experts' matmuls (`matmul_id`: one dispatch over every token's chosen
//! experts, whatever the batch) and their weighted sum (`moe_sum`).
//! Nothing waits between them: the ids stay on the device.

use crate::backend::check as contract;
use crate::backend::{MoeParams, Op, Result, Tensor};

use super::acts::{self, MatIn};
use super::kernels::matmul_id::{self, Experts};
use super::kernels::matvec_blocks;
use super::kernels::moe::{self, MAX_EXPERTS, MAX_USED};
use super::kernels::quantize::ActQuant;
use super::{GpuBackend, limit};

pub(super) fn topk_moe(
    be: &mut GpuBackend,
    logits: Tensor,
    p: &MoeParams,
    ids: Tensor,
    weights: Tensor,
) -> Result<()> {
    contract::topk_moe(logits, p, ids, weights)?;
    limit(
        Op::TopKMoe,
        logits.cols <= MAX_EXPERTS && p.k <= MAX_USED,
        || {
            format!(
                "{} of {} experts (the GPU routes up to {MAX_USED} of {MAX_EXPERTS})",
                p.k, logits.cols
            )
        },
    )?;
    be.acts.wrote(ids);
    be.acts.wrote(weights);
    let aux = be.aux();
    be.run(moe::topk(logits, p, ids, weights, aux))
}

/// `out` row `t·K + j` = `x_row · w[ids[t, j]]ᵀ` (`Backend::matmul_id`),
/// one dispatch after x's rounding (once per input: gate and up share
/// it).
pub(super) fn matmul_id(
    be: &mut GpuBackend,
    w: Tensor,
    x: Tensor,
    ids: Tensor,
    out: Tensor,
) -> Result<()> {
    be.require(Op::MatMulId, w.dtype)?;
    let n_expert = contract::matmul_id(w, x, ids, out)?;
    // The kernel reads the whole stack through one binding.
    limit(Op::MatMulId, be.buffers.parts(w).is_none(), || {
        format!(
            "experts of {} bytes over the adapter's largest binding",
            w.n_bytes()
        )
    })?;
    // ggml's rounding in the exact mode; the fast mode's integer dots on
    // Q8 blocks where `matvec_blocks` takes the type (prefill as decode:
    // every pair is a mat-vec), else f32.
    let f = be.ctx.features;
    let (q, dots) = if be.ctx.quantize_activations {
        (ActQuant::for_weight(w.dtype), false)
    } else {
        let dots = f.dots(w.dtype);
        (dots.then_some(ActQuant::Q8), dots)
    };
    let input = acts::rounded_input(be, q, x)?;
    be.acts.wrote(out);
    let e = Experts {
        w,
        row_bytes: be.row_param(w.dtype, w.cols),
        n_expert,
        ids: ids.reshape(1, ids.n_elements()),
        out,
    };
    match input {
        MatIn::F32(x) => be.run(matmul_id::f32s(e, x)),
        MatIn::Q8(q8) if dots => be.run(matvec_blocks::dot_id(e, q8, x.rows)),
        MatIn::Q8(q8) => be.run(matmul_id::q8(e, q8, x.rows)),
    }
}

pub(super) fn moe_sum(
    be: &mut GpuBackend,
    experts: Tensor,
    weights: Tensor,
    out: Tensor,
) -> Result<()> {
    contract::moe_sum(experts, weights, out)?;
    be.acts.wrote(out);
    be.run(moe::sum(experts, weights, out))
}
