//! Maps on the CPU: the program runs over chunks of elements, one
//! instruction at a time over the whole chunk, so each instruction is a
//! plain loop the compiler vectorizes.

use crate::cpu::{Cx, par_chunks};
use crate::ops::Io;
use crate::ops::map::{Instr, MapOp, binary, drop_mask, unary};

const CHUNK: usize = 512;

pub fn run(m: &MapOp, cx: &mut Cx, io: &mut Io) {
    let ins = &io.ins;
    let seed = cx.run.seed;
    par_chunks(cx, &mut *io.outs[0], CHUNK, &|start, out| {
        let len = out.len();
        let mut regs = vec![0f32; m.code.len() * len];
        for (r, ins_r) in m.code.iter().enumerate() {
            let (done, rest) = regs.split_at_mut(r * len);
            let dst = &mut rest[..len];
            let reg = |k: u16| &done[k as usize * len..][..len];
            match *ins_r {
                Instr::Input(k) => {
                    let b = m.bcast[k as usize];
                    let x = ins[k as usize];
                    if b.inner == 1 && b.count >= start + len {
                        dst.copy_from_slice(&x[start..start + len]);
                    } else {
                        for (e, d) in dst.iter_mut().enumerate() {
                            *d = x[b.at(start + e)];
                        }
                    }
                }
                Instr::Const(c) => dst.fill(c),
                Instr::Unary(u, a) => {
                    for (d, &x) in dst.iter_mut().zip(reg(a)) {
                        *d = unary(u, x);
                    }
                }
                Instr::Binary(b, a, c) => {
                    for ((d, &x), &y) in dst.iter_mut().zip(reg(a)).zip(reg(c)) {
                        *d = binary(b, x, y);
                    }
                }
                Instr::DropMask { keep, salt } => {
                    for (e, d) in dst.iter_mut().enumerate() {
                        *d = drop_mask((start + e) as u32, seed, salt, keep);
                    }
                }
            }
        }
        out.copy_from_slice(&regs[(m.code.len() - 1) * len..]);
    });
}
