//! Our Metal check: no machine here has Metal, so every WGSL kernel variant
//! the GPU backend can build is parsed and validated by naga, then written
//! as Metal Shading Language (what wgpu does on Apple) and as SPIR-V (what
//! it does on Vulkan). Any error fails, naming the kernel and features.

use naga::back::{msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use smelt::backend::gpu::{Kernel, ShaderFeatures};

fn feature_sets() -> [ShaderFeatures; 9] {
    let f = |subgroups, shader_f16, fused_fma, fast_math, coop| ShaderFeatures {
        subgroups,
        shader_f16,
        fused_fma,
        fast_math,
        coop,
    };
    [
        // ggml's exact arithmetic, with and without each capability.
        f(false, false, false, false, 0),
        f(true, false, false, false, 0),
        f(false, true, true, false, 0),
        f(true, true, true, false, 0),
        f(true, true, false, false, 0),
        // Plain f32 arithmetic (f32 activations).
        f(false, false, false, true, 0),
        f(true, true, true, true, 0),
        // Cooperative matrices: 8×8 as Metal's simdgroup matrices, 16×16
        // as Vulkan's tensor cores.
        f(true, true, true, true, 8),
        f(true, true, true, true, 16),
    ]
}

/// What a device with these features lets naga accept: the fallbacks must
/// validate without the subgroup and f16 capabilities. `unpack2x16float`
/// and `pack2x16float` are WebGPU core (wgpu grants them on Metal, Vulkan
/// and DX12).
fn capabilities(f: ShaderFeatures) -> Capabilities {
    let mut c = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if f.coop != 0 {
        c |= Capabilities::COOPERATIVE_MATRIX;
    }
    if f.subgroups {
        c |= Capabilities::SUBGROUP;
    }
    if f.shader_f16 {
        c |= Capabilities::SHADER_FLOAT16;
    }
    c
}

fn check(kernel: Kernel, f: ShaderFeatures) -> Result<(), String> {
    let src = kernel.source(f);
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
    let info = Validator::new(ValidationFlags::all(), capabilities(f))
        .validate(&module)
        .map_err(|e| e.emit_to_string(&src))?;
    let msl_options = msl::Options {
        lang_version: (2, 4),
        ..Default::default()
    };
    let (metal, _) = msl::write_string(
        &module,
        &info,
        &msl_options,
        &msl::PipelineOptions::default(),
    )
    .map_err(|e| format!("MSL: {e}"))?;
    if !metal.contains("kernel void") {
        return Err("MSL output has no kernel function".into());
    }
    let words = spv::write_vec(&module, &info, &spv::Options::default(), None)
        .map_err(|e| format!("SPIR-V: {e}"))?;
    if words.first() != Some(&0x0723_0203) {
        return Err("SPIR-V output lacks the magic number".into());
    }
    Ok(())
}

#[test]
fn every_kernel_variant_validates_and_writes_msl_and_spirv() {
    let mut failures = Vec::new();
    let mut n = 0;
    for kernel in Kernel::all() {
        for f in feature_sets() {
            if !kernel.builds_with(f) {
                continue;
            }
            n += 1;
            if let Err(e) = check(kernel, f) {
                failures.push(format!("{kernel:?} {f:?}:\n{e}"));
            }
        }
    }
    assert!(n >= 5 * 40, "only {n} variants: the kernel table shrank");
    assert!(
        failures.is_empty(),
        "{} of {n} variants failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    println!("{n} kernel variants validated, written as MSL and SPIR-V");
}

#[test]
fn an_invalid_kernel_is_caught() {
    // The check must be able to fail: a kernel with a type error.
    let bad = "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }";
    assert!(naga::front::wgsl::parse_str(bad).is_err());
}

#[test]
fn preprocessor_selects_branches() {
    let src = "a\n#ifdef X\nb\n#ifndef Y\nc\n#else\nd\n#endif\n#else\ne\n#endif\n{{N}}\n";
    let defs = [("X", String::new()), ("N", "7".to_string())];
    assert_eq!(smelt::backend::gpu::preprocess(src, &defs), "a\nb\nc\n7\n");
    let defs = [("Y", String::new())];
    assert_eq!(smelt::backend::gpu::preprocess(src, &defs), "a\ne\n{{N}}\n");
}
