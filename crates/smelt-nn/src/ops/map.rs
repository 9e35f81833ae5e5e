//! Elementwise maps: a small program over inputs read at broadcast indices,
//! one output of `n` elements. Activations, their derivatives, arithmetic,
//! bias adds, normalisation's centring and scaling and dropout are all maps,
//! so that the compiler can fuse a chain of them into one kernel (`plan::fuse`)
//! and autodiff can differentiate any of them (`MapOp::gradient`).
//!
//! Input `k` of a map is read at `(i / inner) % count` for output element
//! `i`: a full tensor has `inner = 1, count = n`; a per-channel vector of an
//! `[N, C, H, W]` image has `inner = H·W, count = C`; a scalar `inner = n`.
//!
//! The math functions are written once here for the CPU and once in
//! `kernels/map.wgsl` for the GPU, with the same formulas.

use crate::error::{Result, shape_err};

/// Where a map reads input element `(i / inner) % count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bcast {
    pub inner: usize,
    pub count: usize,
}

impl Bcast {
    pub fn full(n: usize) -> Self {
        Bcast { inner: 1, count: n }
    }

    pub fn is_full(&self, n: usize) -> bool {
        self.inner == 1 && self.count == n
    }

    #[inline]
    pub fn at(&self, i: usize) -> usize {
        (i / self.inner) % self.count
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    Neg,
    Relu,
    /// 1 where x > 0, else 0 (ReLU's derivative).
    Step,
    Gelu,
    GeluDeriv,
    Silu,
    SiluDeriv,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Square,
    Recip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
}

/// One instruction; operands are earlier registers (instruction indices).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Instr {
    Input(u16),
    Const(f32),
    Unary(Unary, u16),
    Binary(Binary, u16, u16),
    /// Dropout's scaled mask: `1 / keep` with probability `keep`, else 0,
    /// from a hash of the element index, the run's seed and `salt`.
    DropMask {
        keep: f32,
        salt: u32,
    },
}

/// A map: the program (its last register is the output) and where each
/// input is read.
#[derive(Clone, Debug, PartialEq)]
pub struct MapOp {
    pub code: Vec<Instr>,
    pub bcast: Vec<Bcast>,
    /// The output's shape.
    pub shape: Vec<usize>,
}

impl MapOp {
    pub fn unary(u: Unary, shape: &[usize]) -> Self {
        MapOp {
            code: vec![Instr::Input(0), Instr::Unary(u, 0)],
            bcast: vec![Bcast::full(shape.iter().product())],
            shape: shape.to_vec(),
        }
    }

    pub fn binary(b: Binary, x: Bcast, y: Bcast, shape: &[usize]) -> Self {
        MapOp {
            code: vec![Instr::Input(0), Instr::Input(1), Instr::Binary(b, 0, 1)],
            bcast: vec![x, y],
            shape: shape.to_vec(),
        }
    }

    /// `x · c`.
    pub fn scale(c: f32, shape: &[usize]) -> Self {
        MapOp {
            code: vec![
                Instr::Input(0),
                Instr::Const(c),
                Instr::Binary(Binary::Mul, 0, 1),
            ],
            bcast: vec![Bcast::full(shape.iter().product())],
            shape: shape.to_vec(),
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn uses_seed(&self) -> bool {
        self.code
            .iter()
            .any(|i| matches!(i, Instr::DropMask { .. }))
    }

    /// Checks the program and that inputs of these lengths can be read.
    pub fn check(&self, input_lens: &[usize]) -> Result<()> {
        let n = self.len();
        if input_lens.len() != self.bcast.len() {
            return shape_err(
                "map",
                format!("{} inputs for {}", input_lens.len(), self.bcast.len()),
            );
        }
        for (k, (b, &len)) in self.bcast.iter().zip(input_lens).enumerate() {
            let period = b.inner.saturating_mul(b.count);
            if b.count != len
                || b.inner == 0
                || b.count == 0
                || period > n
                || !n.is_multiple_of(period)
            {
                return shape_err(
                    "map",
                    format!("input {k} of {len} elements cannot be read as {b:?} for {n} outputs"),
                );
            }
        }
        for (r, ins) in self.code.iter().enumerate() {
            let ok = match *ins {
                Instr::Input(k) => (k as usize) < self.bcast.len(),
                Instr::Unary(_, a) => (a as usize) < r,
                Instr::Binary(_, a, b) => (a as usize) < r && (b as usize) < r,
                Instr::Const(_) | Instr::DropMask { .. } => true,
            };
            if !ok {
                return shape_err("map", format!("instruction {r} ({ins:?}) reads ahead"));
            }
        }
        if self.code.is_empty() {
            return shape_err("map", "empty program");
        }
        Ok(())
    }

    /// Drops instructions the output does not need and inputs no
    /// instruction reads (returns which old inputs remain, in order).
    pub fn prune(&mut self) -> Vec<usize> {
        let last = self.code.len() - 1;
        let mut live = vec![false; self.code.len()];
        live[last] = true;
        for r in (0..=last).rev() {
            if !live[r] {
                continue;
            }
            match self.code[r] {
                Instr::Unary(_, a) => live[a as usize] = true,
                Instr::Binary(_, a, b) => {
                    live[a as usize] = true;
                    live[b as usize] = true;
                }
                _ => {}
            }
        }
        let mut input_used = vec![false; self.bcast.len()];
        for (r, ins) in self.code.iter().enumerate() {
            if let (true, Instr::Input(k)) = (live[r], ins) {
                input_used[*k as usize] = true;
            }
        }
        let kept_inputs: Vec<usize> = (0..self.bcast.len()).filter(|&k| input_used[k]).collect();
        let mut new_input = vec![0u16; self.bcast.len()];
        for (new, &old) in kept_inputs.iter().enumerate() {
            new_input[old] = new as u16;
        }
        let mut new_reg = vec![0u16; self.code.len()];
        let mut code = Vec::new();
        for (r, ins) in self.code.iter().enumerate() {
            if !live[r] {
                continue;
            }
            new_reg[r] = code.len() as u16;
            code.push(match *ins {
                Instr::Input(k) => Instr::Input(new_input[k as usize]),
                Instr::Unary(u, a) => Instr::Unary(u, new_reg[a as usize]),
                Instr::Binary(b, x, y) => {
                    Instr::Binary(b, new_reg[x as usize], new_reg[y as usize])
                }
                other => other,
            });
        }
        self.code = code;
        self.bcast = kept_inputs.iter().map(|&k| self.bcast[k]).collect();
        kept_inputs
    }

    /// Whether this map copies its one input, read in full.
    pub fn is_identity(&self) -> bool {
        self.code == [Instr::Input(0)] && self.bcast.len() == 1 && self.bcast[0].is_full(self.len())
    }

    /// The map that gives the gradient of this map's output with respect to
    /// input `wrt`, at every output element: its inputs are this map's
    /// inputs followed by the output's gradient (full), of which only those
    /// it reads remain: their indices are returned. For a broadcast input
    /// the caller sums the result down to its shape (`SumTo`).
    pub fn gradient(&self, wrt: usize) -> (MapOp, Vec<usize>) {
        let n = self.len();
        let mut code = self.code.clone();
        let g_input = self.bcast.len() as u16;
        let emit = |code: &mut Vec<Instr>, i: Instr| {
            code.push(i);
            (code.len() - 1) as u16
        };
        let n_fwd = self.code.len();
        let mut adj: Vec<Option<u16>> = vec![None; n_fwd];
        adj[n_fwd - 1] = Some(emit(&mut code, Instr::Input(g_input)));
        let mut input_adj: Option<u16> = None;
        let add_to = |code: &mut Vec<Instr>, slot: &mut Option<u16>, a: u16| {
            *slot = Some(match *slot {
                None => a,
                Some(prev) => {
                    code.push(Instr::Binary(Binary::Add, prev, a));
                    (code.len() - 1) as u16
                }
            });
        };
        for r in (0..n_fwd).rev() {
            let Some(a) = adj[r] else { continue };
            let y = r as u16;
            match self.code[r] {
                Instr::Input(k) => {
                    if k as usize == wrt {
                        add_to(&mut code, &mut input_adj, a);
                    }
                }
                Instr::Const(_) | Instr::DropMask { .. } => {}
                Instr::Unary(u, x) => {
                    let d = unary_adjoint(&mut code, u, x, y, a);
                    if let Some(d) = d {
                        let mut slot = adj[x as usize];
                        add_to(&mut code, &mut slot, d);
                        adj[x as usize] = slot;
                    }
                }
                Instr::Binary(b, x, z) => {
                    let (dx, dz) = binary_adjoint(&mut code, b, x, z, y, a);
                    let mut slot = adj[x as usize];
                    add_to(&mut code, &mut slot, dx);
                    adj[x as usize] = slot;
                    let mut slot = adj[z as usize];
                    add_to(&mut code, &mut slot, dz);
                    adj[z as usize] = slot;
                }
            }
        }
        let result = match input_adj {
            Some(r) => r,
            None => emit(&mut code, Instr::Const(0.0)),
        };
        let mut bcast = self.bcast.clone();
        bcast.push(Bcast::full(n));
        let mut m = MapOp {
            code,
            bcast,
            shape: self.shape.clone(),
        };
        m.code.truncate(result as usize + 1);
        let kept = m.prune();
        (m, kept)
    }

    /// This map with input `k` replaced by the program of `producer`, whose
    /// inputs are appended to this map's. The caller has checked that input
    /// `k` is read in full (same element count). Returns the map and which
    /// of the joined inputs (this map's, then the producer's) it reads.
    pub fn inline(&self, k: usize, producer: &MapOp) -> (MapOp, Vec<usize>) {
        let mut code = Vec::with_capacity(self.code.len() + producer.code.len());
        let base_in = self.bcast.len() as u16;
        for ins in &producer.code {
            code.push(match *ins {
                Instr::Input(j) => Instr::Input(base_in + j),
                other => other,
            });
        }
        let p_out = (producer.code.len() - 1) as u16;
        let mut reg = vec![0u16; self.code.len()];
        for (r, ins) in self.code.iter().enumerate() {
            let new = match *ins {
                Instr::Input(j) if j as usize == k => {
                    reg[r] = p_out;
                    continue;
                }
                Instr::Unary(u, a) => Instr::Unary(u, reg[a as usize]),
                Instr::Binary(b, x, y) => Instr::Binary(b, reg[x as usize], reg[y as usize]),
                other => other,
            };
            code.push(new);
            reg[r] = (code.len() - 1) as u16;
        }
        let mut bcast = self.bcast.clone();
        bcast.extend(producer.bcast.iter().copied());
        let mut m = MapOp {
            code,
            bcast,
            shape: self.shape.clone(),
        };
        let out = *reg.last().expect("a map has code") as usize;
        m.code.truncate(out + 1);
        let kept = m.prune();
        (m, kept)
    }
}

/// Emits `a · ∂y/∂x` for `y = u(x)`; `None` where it is zero.
fn unary_adjoint(code: &mut Vec<Instr>, u: Unary, x: u16, y: u16, a: u16) -> Option<u16> {
    let mut emit = |i: Instr| {
        code.push(i);
        (code.len() - 1) as u16
    };
    use Binary::*;
    let d = match u {
        Unary::Neg => return Some(emit(Instr::Unary(Unary::Neg, a))),
        Unary::Step => return None,
        Unary::Relu => emit(Instr::Unary(Unary::Step, x)),
        Unary::Gelu => emit(Instr::Unary(Unary::GeluDeriv, x)),
        Unary::Silu => emit(Instr::Unary(Unary::SiluDeriv, x)),
        Unary::GeluDeriv | Unary::SiluDeriv => {
            // Second derivatives are not needed by any rule here.
            let z = emit(Instr::Const(0.0));
            return Some(z);
        }
        Unary::Sigmoid => {
            // y (1 - y)
            let one = emit(Instr::Const(1.0));
            let t = emit(Instr::Binary(Sub, one, y));
            emit(Instr::Binary(Mul, y, t))
        }
        Unary::Tanh => {
            // 1 - y²
            let one = emit(Instr::Const(1.0));
            let y2 = emit(Instr::Binary(Mul, y, y));
            emit(Instr::Binary(Sub, one, y2))
        }
        Unary::Exp => y,
        Unary::Log => return Some(emit(Instr::Binary(Div, a, x))),
        Unary::Sqrt => {
            // 0.5 / y
            let half = emit(Instr::Const(0.5));
            emit(Instr::Binary(Div, half, y))
        }
        Unary::Rsqrt => {
            // -0.5 y³
            let c = emit(Instr::Const(-0.5));
            let y2 = emit(Instr::Binary(Mul, y, y));
            let y3 = emit(Instr::Binary(Mul, y2, y));
            emit(Instr::Binary(Mul, c, y3))
        }
        Unary::Square => {
            let two = emit(Instr::Const(2.0));
            emit(Instr::Binary(Mul, two, x))
        }
        Unary::Recip => {
            // -y²
            let y2 = emit(Instr::Binary(Mul, y, y));
            emit(Instr::Unary(Unary::Neg, y2))
        }
    };
    Some(emit(Instr::Binary(Mul, a, d)))
}

/// Emits `(a · ∂y/∂x, a · ∂y/∂z)` for `y = x ∘ z`.
fn binary_adjoint(code: &mut Vec<Instr>, b: Binary, x: u16, z: u16, y: u16, a: u16) -> (u16, u16) {
    let mut emit = |i: Instr| {
        code.push(i);
        (code.len() - 1) as u16
    };
    match b {
        Binary::Add => (a, a),
        Binary::Sub => (a, emit(Instr::Unary(Unary::Neg, a))),
        Binary::Mul => (
            emit(Instr::Binary(Binary::Mul, a, z)),
            emit(Instr::Binary(Binary::Mul, a, x)),
        ),
        Binary::Div => {
            // d/dx = a / z; d/dz = -a y / z
            let dx = emit(Instr::Binary(Binary::Div, a, z));
            let t = emit(Instr::Binary(Binary::Mul, dx, y));
            (dx, emit(Instr::Unary(Unary::Neg, t)))
        }
    }
}

// ---- The math, as the GPU computes it (kernels/map.wgsl) ----

const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π)
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7),
/// the same formula as map.wgsl's.
pub fn erf(x: f32) -> f32 {
    let s = if x < 0.0 { -1.0 } else { 1.0 };
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_8) * t - 0.284_496_72) * t
        + 0.254_829_6)
        * t;
    s * (1.0 - poly * (-a * a).exp())
}

pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[inline]
pub fn unary(u: Unary, x: f32) -> f32 {
    match u {
        Unary::Neg => -x,
        Unary::Relu => x.max(0.0),
        Unary::Step => {
            if x > 0.0 {
                1.0
            } else {
                0.0
            }
        }
        Unary::Gelu => 0.5 * x * (1.0 + erf(x * SQRT_HALF)),
        Unary::GeluDeriv => {
            0.5 * (1.0 + erf(x * SQRT_HALF)) + x * INV_SQRT_2PI * (-0.5 * x * x).exp()
        }
        Unary::Silu => x * sigmoid(x),
        Unary::SiluDeriv => {
            let s = sigmoid(x);
            s * (1.0 + x * (1.0 - s))
        }
        Unary::Sigmoid => sigmoid(x),
        Unary::Tanh => x.tanh(),
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Rsqrt => 1.0 / x.sqrt(),
        Unary::Square => x * x,
        Unary::Recip => 1.0 / x,
    }
}

#[inline]
pub fn binary(b: Binary, x: f32, y: f32) -> f32 {
    match b {
        Binary::Add => x + y,
        Binary::Sub => x - y,
        Binary::Mul => x * y,
        Binary::Div => x / y,
    }
}

/// lowbias32: a 32-bit integer hash (same in map.wgsl).
pub fn hash32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Dropout's scaled mask for element `i`.
pub fn drop_mask(i: u32, seed: u32, salt: u32, keep: f32) -> f32 {
    let h = hash32(i ^ hash32(seed ^ salt.wrapping_mul(0x9e37_79b9)));
    let u = (h >> 8) as f32 * (1.0 / 16_777_216.0);
    if u < keep { 1.0 / keep } else { 0.0 }
}
