//! Each kernel's Rust side against its WGSL, through naga's reflection:
//! the parameter block (`kernel_params!`) against the WGSL's `struct
//! Params` at binding 0 (field names, offsets, sizes), and the named
//! binding list against the WGSL's storage bindings (names, numbers,
//! access), for every variant and feature set.

use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::{AddressSpace, StorageAccess, TypeInner};
use smelt::backend::gpu::kernels::{Access, Field};
use smelt::backend::gpu::{Kernel, ShaderFeatures};

fn feature_sets() -> Vec<ShaderFeatures> {
    let f = |subgroups, shader_f16, fused_fma, fast_math, coop| ShaderFeatures {
        subgroups,
        shader_f16,
        fused_fma,
        fast_math,
        coop,
    };
    vec![
        f(false, false, false, false, 0),
        f(true, true, true, false, 0),
        f(false, false, false, true, 0),
        f(true, true, true, true, 0),
        f(true, true, true, true, 8),
        f(true, true, true, true, 16),
    ]
}

/// What is wrong with `kernel`'s layouts in its WGSL `src`, if anything.
fn check(kernel: Kernel, src: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    // Validation computes the layouts the offsets come from.
    Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    let bindings = kernel.bindings();
    let mut params = None;
    let mut declared = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = var.binding else { continue };
        let name = var.name.clone().unwrap_or_default();
        if rb.group != 0 {
            return Err(format!("{name}: group {}", rb.group));
        }
        match var.space {
            AddressSpace::Uniform if rb.binding == 0 => params = Some(var.ty),
            AddressSpace::Storage { access } if rb.binding >= 1 => {
                let access = if access.contains(StorageAccess::STORE) {
                    Access::ReadWrite
                } else {
                    Access::Read
                };
                let Some(b) = bindings.get(rb.binding as usize - 1) else {
                    return Err(format!(
                        "{name} at binding {}: not in the Rust list",
                        rb.binding
                    ));
                };
                if (b.name, b.access) != (name.as_str(), access) {
                    return Err(format!(
                        "binding {}: WGSL {name} {access:?}, Rust {} {:?}",
                        rb.binding, b.name, b.access
                    ));
                }
                declared.push(name);
            }
            _ => return Err(format!("{name}: unexpected binding {}", rb.binding)),
        }
    }
    // Bound but not declared: only exact.wgsl's tables, which a kernel may
    // bind without reading them.
    for b in bindings {
        if !declared.iter().any(|d| d == b.name) && b.name != "tab" {
            return Err(format!("{} is bound but not declared", b.name));
        }
    }
    let ty = params.ok_or("no parameter block at binding 0")?;
    let TypeInner::Struct { members, .. } = &module.types[ty].inner else {
        return Err("the parameter block is not a struct".into());
    };
    let wgsl: Vec<Field> = members
        .iter()
        .map(|m| Field {
            name: Box::leak(m.name.clone().unwrap_or_default().into_boxed_str()),
            offset: m.offset as usize,
            size: module.types[m.ty].inner.size(module.to_ctx()) as usize,
        })
        .collect();
    if wgsl != kernel.param_fields() {
        return Err(format!(
            "parameters: WGSL {wgsl:?}\nRust {:?}",
            kernel.param_fields()
        ));
    }
    Ok(())
}

#[test]
fn every_kernel_declares_its_rust_parameters_and_bindings() {
    let mut failures = Vec::new();
    let mut n = 0;
    for kernel in Kernel::all() {
        for f in feature_sets() {
            if !kernel.builds_with(f) {
                continue;
            }
            n += 1;
            if let Err(e) = check(kernel, &kernel.source(f)) {
                failures.push(format!("{kernel:?} {f:?}: {e}"));
            }
        }
    }
    assert!(n >= 200, "only {n} variants");
    assert!(
        failures.is_empty(),
        "{} of {n} variants differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_field_or_binding_out_of_place_is_caught() {
    // The check must be able to fail: a kernel's WGSL with two parameter
    // fields swapped, and with two bindings' numbers swapped.
    let kernel = Kernel::all()[0];
    let src = kernel.source(ShaderFeatures::default());
    check(kernel, &src).expect("the kernel as it is");
    let fields = kernel.param_fields();
    let (a, b) = (fields[0].name, fields[1].name);
    let swapped = src
        .replacen(&format!("    {a}: "), "    SWAP: ", 1)
        .replacen(&format!("    {b}: "), &format!("    {a}: "), 1)
        .replacen("    SWAP: ", &format!("    {b}: "), 1);
    assert!(check(kernel, &swapped).is_err());
    let renumbered = src
        .replacen("@binding(2)", "@binding(SWAP)", 1)
        .replacen("@binding(3)", "@binding(2)", 1)
        .replacen("@binding(SWAP)", "@binding(3)", 1);
    assert_ne!(renumbered, src);
    assert!(check(kernel, &renumbered).is_err());
}
