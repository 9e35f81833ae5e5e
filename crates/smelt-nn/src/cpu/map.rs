//! Maps on the CPU: the program runs over chunks of elements, one
//! instruction at a time over the whole chunk, so each instruction is a
//! plain loop the compiler vectorizes: the operation is chosen once per
//! instruction, outside the loop. Inputs read in full are used in place
//! (no register copy), broadcast reads walk their index without a division
//! per element, and the last instruction writes the output directly.

use crate::cpu::{Cx, par_chunks};
use crate::ops::Io;
use crate::ops::map::{Bcast, Binary, Instr, MapOp, Unary, binary, drop_mask, unary};

/// Values of registers a chunk holds, at most: the chunk is as long as
/// that allows (a short program runs long chunks, paying each chunk's
/// setup less often), from `MIN_CHUNK` to `MAX_CHUNK` elements.
const REGISTER_VALUES: usize = 16 * 1024;
const MIN_CHUNK: usize = 512;
const MAX_CHUNK: usize = 8192;

pub fn run(m: &MapOp, cx: &mut Cx, io: &mut Io) {
    let ins = &io.ins;
    let seed = cx.run.seed;
    let last = m.code.len() - 1;
    let chunk = (REGISTER_VALUES / last.max(1)).clamp(MIN_CHUNK, MAX_CHUNK);
    par_chunks(cx, &mut *io.outs[0], chunk, &|start, out| {
        let len = out.len();
        // Registers computed into `regs`; full input reads borrowed instead.
        let mut regs = vec![0f32; last * len];
        let mut borrowed: Vec<Option<&[f32]>> = vec![None; m.code.len()];
        for (r, instr) in m.code.iter().enumerate() {
            if let Instr::Input(k) = *instr {
                let b = m.bcast[k as usize];
                let x = ins[k as usize];
                if b.inner == 1 && b.count >= start + len {
                    borrowed[r] = Some(&x[start..start + len]);
                    continue;
                }
            }
            let (done, rest) = regs.split_at_mut(r.min(last) * len);
            let dst: &mut [f32] = if r == last { out } else { &mut rest[..len] };
            let reg = |k: u16| match borrowed[k as usize] {
                Some(s) => s,
                None => &done[k as usize * len..][..len],
            };
            match *instr {
                Instr::Input(k) => read_broadcast(ins[k as usize], m.bcast[k as usize], start, dst),
                Instr::Const(c) => dst.fill(c),
                Instr::Unary(u, a) => unary_loop(u, reg(a), dst),
                Instr::Binary(b, a, c) => binary_loop(b, reg(a), reg(c), dst),
                Instr::DropMask { keep, salt } => {
                    for (e, d) in dst.iter_mut().enumerate() {
                        *d = drop_mask((start + e) as u32, seed, salt, keep);
                    }
                }
            }
        }
        if let Some(s) = borrowed[last] {
            out.copy_from_slice(s);
        }
    });
}

/// `dst[e] = x[b.at(start + e)]`, walking runs of `inner` equal indices.
fn read_broadcast(x: &[f32], b: Bcast, start: usize, dst: &mut [f32]) {
    let mut q = (start / b.inner) % b.count;
    let mut left = b.inner - start % b.inner;
    let mut e = 0;
    while e < dst.len() {
        if b.inner == 1 {
            // A run of consecutive elements up to the end of the period.
            let n = (b.count - q).min(dst.len() - e);
            dst[e..e + n].copy_from_slice(&x[q..q + n]);
            e += n;
            q = 0;
            continue;
        }
        let n = left.min(dst.len() - e);
        dst[e..e + n].fill(x[q]);
        e += n;
        left = b.inner;
        q = if q + 1 == b.count { 0 } else { q + 1 };
    }
}

#[inline(always)]
fn each1(x: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    for (d, &v) in dst.iter_mut().zip(x) {
        *d = f(v);
    }
}

#[inline(always)]
fn each2(x: &[f32], y: &[f32], dst: &mut [f32], f: impl Fn(f32, f32) -> f32) {
    for ((d, &a), &b) in dst.iter_mut().zip(x).zip(y) {
        *d = f(a, b);
    }
}

/// Each operation gets its own loop over the shared formula (`unary` with a
/// constant operation inlines to its arm), so the cheap ones vectorize.
fn unary_loop(u: Unary, x: &[f32], dst: &mut [f32]) {
    macro_rules! arms {
        ($($op:ident),*) => {
            match u {
                $(Unary::$op => each1(x, dst, |v| unary(Unary::$op, v)),)*
            }
        };
    }
    arms!(
        Neg, Relu, Step, Gelu, GeluDeriv, Silu, SiluDeriv, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt,
        Square, Recip
    )
}

fn binary_loop(b: Binary, x: &[f32], y: &[f32], dst: &mut [f32]) {
    match b {
        Binary::Add => each2(x, y, dst, |a, c| binary(Binary::Add, a, c)),
        Binary::Sub => each2(x, y, dst, |a, c| binary(Binary::Sub, a, c)),
        Binary::Mul => each2(x, y, dst, |a, c| binary(Binary::Mul, a, c)),
        Binary::Div => each2(x, y, dst, |a, c| binary(Binary::Div, a, c)),
    }
}
