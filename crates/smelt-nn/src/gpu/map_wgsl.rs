//! A map's kernel: its program written as WGSL, one invocation per output
//! element, each input read at its broadcast index. The sizes are
//! constants of the generated source, so a map kernel has no parameters.

use std::fmt::Write;

use crate::gpu::dispatch::{Bind, Dispatch, Kernel, groups_1d};
use crate::ops::Shapes;
use crate::ops::map::{Binary, Instr, MapOp, Unary};

const WG: usize = 256;

/// A WGSL float literal that reads back as exactly `c`.
fn lit(c: f32) -> String {
    format!("bitcast<f32>({}u)", c.to_bits())
}

fn unary(u: Unary, a: &str) -> String {
    match u {
        Unary::Neg => format!("-{a}"),
        Unary::Relu => format!("max({a}, 0.0)"),
        Unary::Step => format!("step({a})"),
        Unary::Gelu => format!("gelu({a})"),
        Unary::GeluDeriv => format!("gelu_deriv({a})"),
        Unary::Silu => format!("silu({a})"),
        Unary::SiluDeriv => format!("silu_deriv({a})"),
        Unary::Sigmoid => format!("sigmoid({a})"),
        Unary::Tanh => format!("tanh({a})"),
        Unary::Exp => format!("exp({a})"),
        Unary::Log => format!("log({a})"),
        Unary::Sqrt => format!("sqrt({a})"),
        Unary::Rsqrt => format!("1.0 / sqrt({a})"),
        Unary::Square => format!("{a} * {a}"),
        Unary::Recip => format!("1.0 / {a}"),
    }
}

fn binary(b: Binary, x: &str, y: &str) -> String {
    let op = match b {
        Binary::Add => "+",
        Binary::Sub => "-",
        Binary::Mul => "*",
        Binary::Div => "/",
    };
    format!("{x} {op} {y}")
}

/// The kernel's source (without `common.wgsl` and `math.wgsl`).
pub fn source(m: &MapOp) -> String {
    let mut s = String::new();
    let n = m.len();
    let _ = writeln!(
        s,
        "@group(0) @binding(0) var<storage, read_write> out: array<f32>; // ({n})"
    );
    for (k, b) in m.bcast.iter().enumerate() {
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> in{k}: array<f32>; // ({}) read at (i / {}) % {}",
            k + 1,
            b.count,
            b.inner,
            b.count
        );
    }
    if m.uses_seed() {
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> run: array<u32>; // step, seed, …",
            m.bcast.len() + 1
        );
    }
    let _ = writeln!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{"
    );
    let _ = writeln!(
        s,
        "    let i = flat(gid, nwg, {WG}u);\n    if (i >= {n}u) {{\n        return;\n    }}"
    );
    for (r, ins) in m.code.iter().enumerate() {
        let expr = match *ins {
            Instr::Input(k) => {
                let b = m.bcast[k as usize];
                if b.inner == 1 && b.count == n {
                    format!("in{k}[i]")
                } else if b.count == 1 {
                    format!("in{k}[0]")
                } else {
                    format!("in{k}[(i / {}u) % {}u]", b.inner, b.count)
                }
            }
            Instr::Const(c) => lit(c),
            Instr::Unary(u, a) => unary(u, &format!("r{a}")),
            Instr::Binary(b, x, y) => binary(b, &format!("r{x}"), &format!("r{y}")),
            Instr::DropMask { keep, salt } => {
                format!("drop_mask(i, run[1], {salt}u, {})", lit(keep))
            }
        };
        let _ = writeln!(s, "    let r{r} = {expr};");
    }
    let _ = writeln!(s, "    out[i] = r{};\n}}", m.code.len() - 1);
    s
}

pub fn dispatches(m: &MapOp, _: &Shapes) -> Vec<Dispatch> {
    let mut binds = vec![Bind::Out(0)];
    binds.extend((0..m.bcast.len()).map(Bind::In));
    if m.uses_seed() {
        binds.push(Bind::Run);
    }
    vec![Dispatch::new(
        Kernel::generated(source(m)),
        &[],
        binds,
        groups_1d(m.len(), WG),
    )]
}
