//! LSTM and GRU sequences (PyTorch's gate order and formulas), one step
//! after another; a cell is a sequence of one step. The input projection
//! of every step (`x · W_ihᵀ`, and `+ b_ih` for the GRU) is one matmul before the op (`layers::lstm`,
//! `layers::gru`), so the op does the recurrent part. The LSTM adds its
//! bias as it reads each step's projection (a pass over `[T, B, 4H]` fewer
//! than a separate add):
//!
//! LSTM, gates `i, f, g, o` (`[T, B, 4H]` input projections `xp`, bias
//! `[4H]`): `pre = (xp + b) + h₋₁ · W_hhᵀ`, `c = σ(f)·c₋₁ + σ(i)·tanh(g)`,
//! `h = σ(o)·tanh(c)`.
//! Outputs: `hs`, `cs` `[T, B, H]` and the activated gates `[T, B, 4H]`.
//!
//! GRU, gates `r, z, n` (`xp` `[T, B, 3H]`, `rec = h₋₁ · W_hhᵀ + b_hh`):
//! `r = σ(xp_r + rec_r)`, `z = σ(xp_z + rec_z)`, `n = tanh(xp_n + r·rec_n)`,
//! `h = (1 − z)·n + z·h₋₁`. Outputs: `hs` and `[r, z, n, rec_n]` `[T, B, 4H]`.
//!
//! Each recurrent product sums over `k` in order from zero (`gemm`'s and
//! `rnn.wgsl`'s order), then adds it to `xp`. The gradient ops run the
//! steps backwards and give the pre-activation gradients; `W_hh`'s
//! gradient is then one matmul of them with the shifted states
//! (`SeqShift`).
//!
//! On the GPU an LSTM runs each way as one dispatch (`Sequence`: batch rows
//! are independent, so a workgroup runs every step of its rows); the GRU,
//! and an LSTM too wide for workgroup memory, one dispatch per step.

use crate::cpu::Cx;
use crate::cpu::gemm::{PackedB, View, gemm_packed};
use crate::cpu::lstm;
use crate::error::{NnError, Result, shape_err};
use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::graph::{Graph, Shape, Value};
use crate::ops::map::sigmoid;
use crate::ops::matmul::MatMul;
use crate::ops::{Backward, Bcast, Io, Op, Shapes};

/// `(T, B, H)` of a recurrent op whose `xp` has `gates·H` features.
fn dims(
    name: &'static str,
    gates: usize,
    xp: &[usize],
    w: &[usize],
) -> Result<(usize, usize, usize)> {
    let ([t, b, gh], [wr, h]) = (xp, w) else {
        return shape_err(
            name,
            format!("input {xp:?} and weight {w:?}: want [T, B, {gates}H] and [{gates}H, H]"),
        );
    };
    if *gh != gates * h || *wr != gates * h {
        return shape_err(
            name,
            format!("input {xp:?} and weight {w:?}: want [T, B, {gates}H] and [{gates}H, H]"),
        );
    }
    Ok((*t, *b, *h))
}

fn want(name: &'static str, s: &[usize], shape: &[usize]) -> Result<()> {
    if s != shape {
        return shape_err(name, format!("{s:?} where {shape:?} is wanted"));
    }
    Ok(())
}

/// Inputs: xp, w_hh, bias, h0, c0.
pub fn infer_lstm(s: &[&[usize]]) -> Result<Vec<Shape>> {
    let (t, b, h) = dims("lstm", 4, s[0], s[1])?;
    want("lstm", s[2], &[4 * h])?;
    want("lstm", s[3], &[b, h])?;
    want("lstm", s[4], &[b, h])?;
    Ok(vec![vec![t, b, h], vec![t, b, h], vec![t, b, 4 * h]])
}

/// Inputs: dhs, gates, cs, c0, w_hh. Outputs: dxp, dh0, dc0.
pub fn infer_lstm_grad(s: &[&[usize]]) -> Result<Vec<Shape>> {
    let (t, b, h) = dims("lstm_grad", 4, s[1], s[4])?;
    want("lstm_grad", s[0], &[t, b, h])?;
    want("lstm_grad", s[2], &[t, b, h])?;
    want("lstm_grad", s[3], &[b, h])?;
    Ok(vec![vec![t, b, 4 * h], vec![b, h], vec![b, h]])
}

/// Inputs: xp, w_hh, b_hh, h0.
pub fn infer_gru(s: &[&[usize]]) -> Result<Vec<Shape>> {
    let (t, b, h) = dims("gru", 3, s[0], s[1])?;
    want("gru", s[2], &[3 * h])?;
    want("gru", s[3], &[b, h])?;
    Ok(vec![vec![t, b, h], vec![t, b, 4 * h]])
}

/// Inputs: dhs, acts, hs, h0, w_hh. Outputs: dxp, drec, dh0.
pub fn infer_gru_grad(s: &[&[usize]]) -> Result<Vec<Shape>> {
    let (t, b, h) = dims("gru_grad", 3, &[s[0][0], s[0][1], 3 * s[0][2]], s[4])?;
    want("gru_grad", s[1], &[t, b, 4 * h])?;
    want("gru_grad", s[2], &[t, b, h])?;
    want("gru_grad", s[3], &[b, h])?;
    Ok(vec![vec![t, b, 3 * h], vec![t, b, 3 * h], vec![b, h]])
}

pub fn infer_shift(s: &[&[usize]]) -> Result<Vec<Shape>> {
    match (s[0], s[1]) {
        ([b, h], [_, b2, h2]) if b == b2 && h == h2 => Ok(vec![s[1].to_vec()]),
        _ => shape_err("seq_shift", format!("{s:?}")),
    }
}

fn no_state_grads(name: &str, grads: &[Option<Value>]) -> Result<()> {
    if grads[1..].iter().any(Option::is_some) {
        return Err(NnError::Graph(format!(
            "{name}: only the outputs hs have gradients (not the cell states or gates)"
        )));
    }
    Ok(())
}

/// `dW_hh = Σ_{t,b} dpre[t,b]ᵀ · h₋₁[t,b]`.
fn weight_grad(g: &mut Graph, dpre: Value, h0: Value, hs: Value) -> Result<Value> {
    let prev = g.node1(Op::SeqShift, &[h0, hs])?;
    let [t, b, gh] = g.shape(dpre).to_vec()[..] else {
        unreachable!()
    };
    let h = g.shape(hs)[2];
    let d2 = g.reshape(dpre, &[t * b, gh])?;
    let p2 = g.reshape(prev, &[t * b, h])?;
    g.node1(
        Op::MatMul(MatMul {
            trans_a: true,
            trans_b: false,
        }),
        &[d2, p2],
    )
}

/// A bias's gradient: its pre-activation gradients `[T, B, G·H]` summed
/// over every step and row.
fn bias_grad(g: &mut Graph, dpre: Value) -> Result<Value> {
    let gh = g.shape(dpre)[2];
    g.sum_to(
        dpre,
        Bcast {
            inner: 1,
            count: gh,
        },
    )
}

pub fn backward_lstm(g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    no_state_grads("lstm", b.grads)?;
    let Some(dhs) = b.grads[0] else {
        return Ok(vec![None; 5]);
    };
    let [_, w, _, h0, c0] = b.inputs[..] else {
        unreachable!()
    };
    let [hs, cs, gates] = b.outputs[..] else {
        unreachable!()
    };
    let out = g.add_node(Op::LstmGrad, &[dhs, gates, cs, c0, w])?;
    let dw = if b.needs[1] {
        Some(weight_grad(g, out[0], h0, hs)?)
    } else {
        None
    };
    let db = if b.needs[2] {
        Some(bias_grad(g, out[0])?)
    } else {
        None
    };
    Ok(vec![Some(out[0]), dw, db, Some(out[1]), Some(out[2])])
}

pub fn backward_gru(g: &mut Graph, b: &Backward) -> Result<Vec<Option<Value>>> {
    no_state_grads("gru", b.grads)?;
    let Some(dhs) = b.grads[0] else {
        return Ok(vec![None; 4]);
    };
    let [_, w, _, h0] = b.inputs[..] else {
        unreachable!()
    };
    let [hs, acts] = b.outputs[..] else {
        unreachable!()
    };
    let out = g.add_node(Op::GruGrad, &[dhs, acts, hs, h0, w])?;
    let dw = if b.needs[1] {
        Some(weight_grad(g, out[1], h0, hs)?)
    } else {
        None
    };
    let db = if b.needs[2] {
        Some(bias_grad(g, out[1])?)
    } else {
        None
    };
    Ok(vec![Some(out[0]), dw, db, Some(out[2])])
}

pub fn backward_shift(_: &mut Graph, _: &Backward) -> Result<Vec<Option<Value>>> {
    Err(NnError::Graph("seq_shift has no gradient".into()))
}

// ---- CPU ----

/// `W[G·H, H]ᵀ` packed for `h[B, H] · Wᵀ`, once per sequence.
fn pack_forward(w: &[f32], gh: usize, hd: usize) -> PackedB {
    PackedB::new(hd, gh, View::new(w, gh, hd, true))
}

/// `W[G·H, H]` packed for `d[B, G·H] · W`, once per sequence.
fn pack_backward(w: &[f32], gh: usize, hd: usize) -> PackedB {
    PackedB::new(gh, hd, View::new(w, hd, gh, false))
}

/// `out[B, G·H] = h[B, H] · W[G·H, H]ᵀ`.
fn recurrent(cx: &mut Cx, h: &[f32], w: &PackedB, b: usize, hd: usize, out: &mut [f32]) {
    gemm_packed(cx, b, View::new(h, hd, b, false), w, out);
}

/// `out[B, H] = d[B, G·H] · W[G·H, H]`.
fn back_recurrent(cx: &mut Cx, d: &[f32], w: &PackedB, b: usize, gh: usize, out: &mut [f32]) {
    gemm_packed(cx, b, View::new(d, gh, b, false), w, out);
}

pub fn cpu_lstm(cx: &mut Cx, io: &mut Io) {
    let (t, b, h) = dims("lstm", 4, &io.shapes.ins[0], &io.shapes.ins[1]).expect("checked");
    let (xp, w, bias, h0, c0) = (io.ins[0], io.ins[1], io.ins[2], io.ins[3], io.ins[4]);
    let [hs, cs, gates] = &mut io.outs[..] else {
        unreachable!()
    };
    let w = pack_forward(w, 4 * h, h);
    let seq = lstm::Sequence {
        h0,
        c0,
        xp,
        bias,
        gates,
        cs,
        hs,
    };
    lstm::forward(cx, &w, lstm::Dims { t, b, h }, seq);
}

pub fn cpu_lstm_grad(cx: &mut Cx, io: &mut Io) {
    let (t, b, h) = dims("lstm_grad", 4, &io.shapes.ins[1], &io.shapes.ins[4]).expect("checked");
    let (dhs, gates, cs, c0, w) = (io.ins[0], io.ins[1], io.ins[2], io.ins[3], io.ins[4]);
    let [dxp, dh0, dc0] = &mut io.outs[..] else {
        unreachable!()
    };
    let w = pack_backward(w, 4 * h, h);
    let seq = lstm::GradSequence {
        dhs,
        gates,
        cs,
        c0,
        dxp,
        dh0,
        dc0,
    };
    lstm::backward(cx, &w, lstm::Dims { t, b, h }, seq);
}

pub fn cpu_gru(cx: &mut Cx, io: &mut Io) {
    let (t, b, h) = dims("gru", 3, &io.shapes.ins[0], &io.shapes.ins[1]).expect("checked");
    let (xp, w, bias, h0) = (io.ins[0], io.ins[1], io.ins[2], io.ins[3]);
    let [hs, acts] = &mut io.outs[..] else {
        unreachable!()
    };
    let w = pack_forward(w, 3 * h, h);
    let mut rec = vec![0f32; b * 3 * h];
    for s in 0..t {
        {
            let hprev = if s == 0 {
                h0
            } else {
                &hs[(s - 1) * b * h..][..b * h]
            };
            recurrent(cx, hprev, &w, b, h, &mut rec);
        }
        for bi in 0..b {
            for j in 0..h {
                let x = |q: usize| xp[(s * b + bi) * 3 * h + q * h + j];
                let rc = |q: usize| rec[bi * 3 * h + q * h + j] + bias[q * h + j];
                let r = sigmoid(x(0) + rc(0));
                let z = sigmoid(x(1) + rc(1));
                let hn = rc(2);
                let n = (x(2) + r * hn).tanh();
                let hprev = if s == 0 {
                    h0[bi * h + j]
                } else {
                    hs[((s - 1) * b + bi) * h + j]
                };
                hs[(s * b + bi) * h + j] = (1.0 - z) * n + z * hprev;
                let a = (s * b + bi) * 4 * h + j;
                acts[a] = r;
                acts[a + h] = z;
                acts[a + 2 * h] = n;
                acts[a + 3 * h] = hn;
            }
        }
    }
}

pub fn cpu_gru_grad(cx: &mut Cx, io: &mut Io) {
    let s0 = &io.shapes.ins[0];
    let (t, b, h) = (s0[0], s0[1], s0[2]);
    let (dhs, acts, hs, h0, w) = (io.ins[0], io.ins[1], io.ins[2], io.ins[3], io.ins[4]);
    let [dxp, drec, dh0] = &mut io.outs[..] else {
        unreachable!()
    };
    let w = pack_backward(w, 3 * h, h);
    let mut dh_rec = vec![0f32; b * h];
    // dh0 holds each step's dh for the next (earlier) step's direct term.
    dh0.fill(0.0);
    for s in (0..t).rev() {
        if s + 1 < t {
            back_recurrent(
                cx,
                &drec[(s + 1) * b * 3 * h..][..b * 3 * h],
                &w,
                b,
                3 * h,
                &mut dh_rec,
            );
        }
        for bi in 0..b {
            for j in 0..h {
                let a = (s * b + bi) * 4 * h + j;
                let (r, z, n, hn) = (acts[a], acts[a + h], acts[a + 2 * h], acts[a + 3 * h]);
                let dh = if s + 1 < t {
                    let zn = acts[((s + 1) * b + bi) * 4 * h + h + j];
                    dhs[(s * b + bi) * h + j] + dh_rec[bi * h + j] + dh0[bi * h + j] * zn
                } else {
                    dhs[(s * b + bi) * h + j]
                };
                dh0[bi * h + j] = dh;
                let hprev = if s == 0 {
                    h0[bi * h + j]
                } else {
                    hs[((s - 1) * b + bi) * h + j]
                };
                let dn = dh * (1.0 - z) * (1.0 - n * n);
                let dz = dh * (hprev - n) * (z * (1.0 - z));
                let dr = dn * hn * (r * (1.0 - r));
                let o = (s * b + bi) * 3 * h + j;
                dxp[o] = dr;
                dxp[o + h] = dz;
                dxp[o + 2 * h] = dn;
                drec[o] = dr;
                drec[o + h] = dz;
                drec[o + 2 * h] = dn * r;
            }
        }
    }
    back_recurrent(cx, &drec[..b * 3 * h], &w, b, 3 * h, &mut dh_rec);
    let z0 = |bi: usize, j: usize| acts[bi * 4 * h + h + j];
    for bi in 0..b {
        for j in 0..h {
            dh0[bi * h + j] = dh_rec[bi * h + j] + dh0[bi * h + j] * z0(bi, j);
        }
    }
}

pub fn cpu_shift(_: &mut Cx, io: &mut Io) {
    let n0 = io.ins[0].len();
    let out = &mut *io.outs[0];
    out[..n0].copy_from_slice(io.ins[0]);
    let rest = out.len() - n0;
    out[n0..].copy_from_slice(&io.ins[1][..rest]);
}

// ---- GPU ----

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RnnParams {
    pub steps: u32,
    pub batch: u32,
    pub hidden: u32,
    /// The step this dispatch runs; `steps` for the final `dh0` product.
    pub t: u32,
}

pub const RNN_FIELDS: &[&str] = &["steps", "batch", "hidden", "t"];

fn step_dispatches(
    define: &'static str,
    t: usize,
    b: usize,
    h: usize,
    binds: Vec<Bind>,
    order: impl Iterator<Item = usize>,
) -> Vec<Dispatch> {
    order
        .map(|s| {
            let p = RnnParams {
                steps: t as u32,
                batch: b as u32,
                hidden: h as u32,
                t: s as u32,
            };
            Dispatch::new(
                Kernel::new("rnn", &[define]),
                bytemuck::bytes_of(&p),
                binds.clone(),
                groups_1d(b * h, 64),
            )
        })
        .collect()
}

pub fn gpu_lstm(s: &Shapes) -> Vec<Dispatch> {
    let (t, b, h) = dims("lstm", 4, &s.ins[0], &s.ins[1]).expect("checked");
    let binds = vec![
        Bind::In(0),
        Bind::Scratch,
        Bind::In(3),
        Bind::In(4),
        Bind::Out(0),
        Bind::Out(1),
        Bind::Out(2),
        Bind::In(2),
    ];
    let mut d = vec![transpose_recurrent(4 * h, h)];
    match Sequence::fits(b, h, h) {
        Some(seq) => d.push(seq.dispatch("LSTM_SEQ", t, b, h, binds)),
        None => d.extend(step_dispatches("LSTM", t, b, h, binds, 0..t)),
    }
    d
}

/// The layout of a whole-sequence kernel (`LSTM_SEQ`, `LSTM_GRAD_SEQ`): a
/// workgroup of `wg` invocations (one per hidden unit, looping past `wg`)
/// runs every step for `rows` batch rows, holding `rows × width` floats of
/// the recurrent operand in workgroup memory.
struct Sequence {
    rows: usize,
    wg: usize,
    width: usize,
}

/// Workgroup memory WebGPU guarantees, in floats (16 KiB).
const SHARED_FLOATS: usize = 4096;

impl Sequence {
    /// `None` when one row's operand (`width` floats) does not fit, or the
    /// batch needs more workgroups than a dispatch has: the per-step
    /// kernels run instead. Rows per workgroup grow with the batch (each
    /// workgroup streams all of `W_hh` every step; small batches keep more
    /// workgroups busy).
    fn fits(b: usize, h: usize, width: usize) -> Option<Sequence> {
        let wanted = match b {
            0..=64 => 1,
            65..=256 => 2,
            _ => 4,
        };
        let rows = wanted.min(SHARED_FLOATS / width.max(1));
        if rows == 0 || b.div_ceil(rows) > 65535 {
            return None;
        }
        Some(Sequence {
            rows,
            wg: h.next_multiple_of(32).min(256),
            width,
        })
    }

    fn dispatch(
        &self,
        define: &'static str,
        t: usize,
        b: usize,
        h: usize,
        binds: Vec<Bind>,
    ) -> Dispatch {
        let p = RnnParams {
            steps: t as u32,
            batch: b as u32,
            hidden: h as u32,
            t: 0,
        };
        let kernel = Kernel::with_values(
            "rnn",
            &[
                (define, String::new()),
                ("ROWS", self.rows.to_string()),
                ("WG", self.wg.to_string()),
                ("SHARED", (self.rows * self.width).to_string()),
            ],
        );
        Dispatch::new(
            kernel,
            bytemuck::bytes_of(&p),
            binds,
            [b.div_ceil(self.rows).max(1) as u32, 1, 1],
        )
    }
}

/// `W_hh (rows, H)` transposed into the scratch buffer, read by the
/// forward steps.
fn transpose_recurrent(rows: usize, h: usize) -> Dispatch {
    let p = RnnParams {
        steps: rows as u32,
        batch: 0,
        hidden: h as u32,
        t: 0,
    };
    Dispatch {
        scratch: rows * h,
        ..Dispatch::new(
            Kernel::new("rnn", &["TRANSPOSE"]),
            bytemuck::bytes_of(&p),
            vec![Bind::In(1), Bind::Scratch],
            groups_1d(rows * h, 64),
        )
    }
}

pub fn gpu_lstm_grad(s: &Shapes) -> Vec<Dispatch> {
    let (t, b, h) = dims("lstm_grad", 4, &s.ins[1], &s.ins[4]).expect("checked");
    let binds = vec![
        Bind::In(0),
        Bind::In(1),
        Bind::In(2),
        Bind::In(3),
        Bind::In(4),
        Bind::Out(0),
        Bind::Out(1),
        Bind::Out(2),
    ];
    match Sequence::fits(b, h, 4 * h) {
        Some(seq) => vec![seq.dispatch("LSTM_GRAD_SEQ", t, b, h, binds)],
        None => step_dispatches("LSTM_GRAD", t, b, h, binds, (0..t).rev().chain([t])),
    }
}

pub fn gpu_gru(s: &Shapes) -> Vec<Dispatch> {
    let (t, b, h) = dims("gru", 3, &s.ins[0], &s.ins[1]).expect("checked");
    let binds = vec![
        Bind::In(0),
        Bind::Scratch,
        Bind::In(2),
        Bind::In(3),
        Bind::Out(0),
        Bind::Out(1),
    ];
    let mut d = vec![transpose_recurrent(3 * h, h)];
    d.extend(step_dispatches("GRU", t, b, h, binds, 0..t));
    d
}

pub fn gpu_gru_grad(s: &Shapes) -> Vec<Dispatch> {
    let s0 = &s.ins[0];
    let (t, b, h) = (s0[0], s0[1], s0[2]);
    let binds = vec![
        Bind::In(0),
        Bind::In(1),
        Bind::In(2),
        Bind::In(3),
        Bind::In(4),
        Bind::Out(0),
        Bind::Out(1),
        Bind::Out(2),
    ];
    step_dispatches("GRU_GRAD", t, b, h, binds, (0..t).rev().chain([t]))
}

pub fn gpu_shift(s: &Shapes) -> Vec<Dispatch> {
    let n: usize = s.outs[0].iter().product();
    let n0: usize = s.ins[0].iter().product();
    let p = RnnParams {
        steps: n as u32,
        batch: n0 as u32,
        hidden: 0,
        t: 0,
    };
    vec![Dispatch::new(
        Kernel::new("rnn", &["SHIFT"]),
        bytemuck::bytes_of(&p),
        vec![Bind::In(0), Bind::In(1), Bind::Out(0)],
        groups_1d(n, 64),
    )]
}
