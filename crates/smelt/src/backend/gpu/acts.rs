//! A matmul's activations as its kernel reads them: rounded as ggml rounds
//! them (Q8 blocks, or Q8_K or f16 values; `quantize.wgsl`), or as the coop
//! matmul's f16 blocks. Each is computed once per input and shared by the
//! matmuls of that input (Q, K, V; gate, up). Each rounding is a step on
//! the tape (`Step::RoundQ8`, `Step::Half`), which the op before it may
//! take into its own dispatch (`fuse::round_q8`, `fuse::half_blocks`).

use crate::backend::{Result, Tensor};
use crate::quant::GgmlType;

use super::GpuBackend;
use super::kernels::quantize::{self, ActQuant};
use super::tape::Step;

/// The buffers, grown on first use of a larger batch and reused, and what
/// they hold.
#[derive(Default)]
pub(super) struct Acts {
    /// Values that fit: rounded values, or Q8 quants, as F32 or I32 words.
    capacity: usize,
    /// `1 × capacity` F32: Q8_K- or f16-rounded values.
    vals: Option<Tensor>,
    /// Q8 blocks: quants 4 per word (`1 × capacity / 4` I32), scales and
    /// sums (`1 × capacity / 32` F32 each). Two sets, each rounding into
    /// the other than the last: a fused op that reads one set's rounding
    /// (`MatVecGlu`) writes its output's to the other.
    q8: [Option<[Tensor; 3]>; 2],
    /// The set that holds the cached rounding (`held`).
    q8_set: usize,
    /// `1 × capacity` F16: packed f16 activations of the cooperative-matrix
    /// matmul (`half_input`). Two sets, as `q8`: a fused op that reads one
    /// set (`Step::CoopGateUp`) writes its output's blocks to the other.
    half: [Option<Tensor>; 2],
    /// The set that holds the cached blocks (`held`).
    half_set: usize,
    /// What they hold: (tensor id, rows, cols, form), valid until anything
    /// may have written that tensor.
    held: Option<(u32, usize, usize, Held)>,
    /// A split matmul's second half's sums (`split_sums`).
    split_sums: Option<Tensor>,
    /// A split decode attention's parts (`attention_parts`).
    attention_parts: Option<Tensor>,
}

/// What `Acts` holds of a tensor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// ggml's rounding for a matmul's weight type (`quantize.wgsl`, or the
    /// op before it, fused).
    Rounded(ActQuant),
    /// Packed f16 for the cooperative-matrix matmul (`half_input`).
    Half,
}

/// The input a matmul kernel reads.
pub(super) enum MatIn {
    /// F32 values: the activations themselves or their rounding.
    F32(Tensor),
    /// Q8 blocks: quants, scales, sums.
    Q8([Tensor; 3]),
}

impl Acts {
    /// Forgets what is held: anything may have been written.
    pub(super) fn forget(&mut self) {
        self.held = None;
    }

    /// Forgets what is held if it came from `out`, which was written.
    pub(super) fn wrote(&mut self, out: Tensor) {
        if self.held.is_some_and(|(id, ..)| id == out.id) {
            self.held = None;
        }
    }

    /// Makes the buffers hold at least `n` values (a new, empty set if they
    /// held fewer); their capacity.
    fn grow(&mut self, n: usize) -> usize {
        let n = n.max(32);
        if self.capacity < n {
            *self = Acts {
                capacity: n,
                split_sums: self.split_sums,
                attention_parts: self.attention_parts,
                ..Acts::default()
            };
        }
        self.capacity
    }
}

/// `x` rounded as ggml rounds a matmul's activations for weights of type
/// `w` (in f32 mode for `matmul::dot_decode` only), or `x` itself.
pub(super) fn matmul_input(be: &mut GpuBackend, w: GgmlType, x: Tensor) -> Result<MatIn> {
    // ggml's rounding for the weight type; the f32 mode's integer-dot
    // decode takes Q8 blocks of 32 for every type it runs.
    let q = if be.ctx.quantize_activations {
        ActQuant::for_weight(w)
    } else {
        super::matmul::dot_decode(be, w, x).then_some(ActQuant::Q8)
    };
    rounded_input(be, q, x)
}

/// `x` rounded as `q` says (once per input, as `matmul_input`), or `x`
/// itself for `None`.
pub(super) fn rounded_input(be: &mut GpuBackend, q: Option<ActQuant>, x: Tensor) -> Result<MatIn> {
    let Some(q) = q else {
        return Ok(MatIn::F32(x));
    };
    let key = Some((x.id, x.rows, x.cols, Held::Rounded(q)));
    let cap = be.acts.grow(x.n_elements());
    let n = x.n_elements();
    if q != ActQuant::Q8 {
        let vals = match be.acts.vals {
            Some(v) => v,
            None => {
                let v = be.alloc_tensor(GgmlType::F32, 1, cap)?;
                be.acts.vals = Some(v);
                v
            }
        };
        let vals = vals.reshape(x.rows, x.cols);
        if be.acts.held != key {
            be.run(quantize::values(q, x, vals))?;
            be.acts.held = key;
        }
        return Ok(MatIn::F32(vals));
    }
    let fresh = be.acts.held != key;
    let set = if fresh {
        1 - be.acts.q8_set
    } else {
        be.acts.q8_set
    };
    let bufs = match be.acts.q8[set] {
        Some(b) => b,
        None => {
            let b = [
                be.alloc_tensor(GgmlType::I32, 1, cap / 4)?,
                be.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
                be.alloc_tensor(GgmlType::F32, 1, cap / 32)?,
            ];
            be.acts.q8[set] = Some(b);
            b
        }
    };
    let q8 = [
        bufs[0].reshape(1, n / 4),
        bufs[1].reshape(1, n / 32),
        bufs[2].reshape(1, n / 32),
    ];
    if fresh {
        be.acts.q8_set = set;
        be.record(Step::RoundQ8 { x, q8 });
        be.acts.held = key;
    }
    Ok(MatIn::Q8(q8))
}

/// `x` as packed f16 for `matmul_coop.wgsl`, which would round it so
/// when staging: rounded once per input rather than once per tile of
/// rows, and read at half the bytes. The tensor has x's shape but
/// `HalfBlocks`' layout (blocks of 32 along a row, each block of all
/// rows together); only that kernel reads it. x's columns are a
/// multiple of 32 (the caller's condition for the coop matmul).
pub(super) fn half_input(be: &mut GpuBackend, x: Tensor) -> Result<Tensor> {
    let cap = be.acts.grow(x.n_elements());
    let key = Some((x.id, x.rows, x.cols, Held::Half));
    let fresh = be.acts.held != key;
    let set = if fresh {
        1 - be.acts.half_set
    } else {
        be.acts.half_set
    };
    let half = match be.acts.half[set] {
        Some(t) => t,
        None => {
            let t = be.alloc_tensor(GgmlType::F16, 1, cap)?;
            be.acts.half[set] = Some(t);
            t
        }
    };
    let half = half.reshape(x.rows, x.cols);
    if fresh {
        be.acts.half_set = set;
        be.record(Step::Half { x, half });
        be.acts.held = key;
    }
    Ok(half)
}

/// A `1 × n` F32 scratch for a split matmul's second half
/// (`CoopTile::HugeSplit`), grown when a larger one is asked for.
pub(super) fn split_sums(be: &mut GpuBackend, n: usize) -> Result<Tensor> {
    scratch(be, |a| &mut a.split_sums, n)
}

/// A `1 × n` F32 scratch for a split decode attention's parts
/// (`attention::Parts`), grown likewise.
pub(super) fn attention_parts(be: &mut GpuBackend, n: usize) -> Result<Tensor> {
    scratch(be, |a| &mut a.attention_parts, n)
}

/// The scratch `slot` of `Acts` as `1 × n`, allocated or grown to it.
fn scratch(
    be: &mut GpuBackend,
    slot: fn(&mut Acts) -> &mut Option<Tensor>,
    n: usize,
) -> Result<Tensor> {
    match *slot(&mut be.acts) {
        Some(t) if t.n_elements() >= n => Ok(t.reshape(1, n)),
        _ => {
            let t = be.alloc_tensor(GgmlType::F32, 1, n)?;
            *slot(&mut be.acts) = Some(t);
            Ok(t)
        }
    }
}
