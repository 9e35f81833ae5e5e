//! The pipeline cache: each [`Kernel`]'s WGSL (put together by its family,
//! `kernels/`) compiled on first use and kept for the session, and the
//! preprocessor that builds the variants.
//!
//! WGSL has no preprocessor, so variants come from a small one here:
//! `#ifdef NAME`, `#ifndef NAME`, `#else`, `#endif` lines, and `{{NAME}}`
//! replaced by a define's value.

use std::collections::HashMap;

use super::kernels::{Access, Kernel, PARAMS_BYTES, ShaderFeatures};

/// Applies `#ifdef`/`#ifndef`/`#else`/`#endif` lines and `{{NAME}}`
/// substitutions. Directive lines themselves are dropped.
pub fn preprocess(text: &str, defines: &[(&str, String)]) -> String {
    let defined = |name: &str| defines.iter().any(|(d, _)| *d == name);
    // One entry per open #if: (this branch is live, the enclosing is live).
    let mut stack: Vec<(bool, bool)> = Vec::new();
    let mut live = true;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("#ifdef ") {
            stack.push((live, live));
            live = live && defined(name.trim());
        } else if let Some(name) = t.strip_prefix("#ifndef ") {
            stack.push((live, live));
            live = live && !defined(name.trim());
        } else if t == "#else" {
            let (_, outer) = *stack
                .last()
                .expect("#else without #ifdef in an embedded kernel");
            live = outer && !live;
        } else if t == "#endif" {
            let (_, outer) = stack
                .pop()
                .expect("#endif without #ifdef in an embedded kernel");
            live = outer;
        } else if live {
            let mut l = line.to_string();
            for (name, value) in defines {
                l = l.replace(&format!("{{{{{name}}}}}"), value);
            }
            out.push_str(&l);
            out.push('\n');
        }
    }
    assert!(stack.is_empty(), "unclosed #ifdef in an embedded kernel");
    out
}

/// A compiled kernel and the layout its bind groups use.
pub struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

/// Compiled pipelines, built on first use and kept for the session.
#[derive(Default)]
pub struct PipelineCache {
    map: HashMap<Kernel, Pipeline>,
}

impl PipelineCache {
    pub fn get_or_build(
        &mut self,
        device: &wgpu::Device,
        kernel: Kernel,
        features: ShaderFeatures,
        bounds_checks: bool,
    ) -> &Pipeline {
        self.map
            .entry(kernel)
            .or_insert_with(|| build(device, kernel, features, bounds_checks))
    }
}

fn build(
    device: &wgpu::Device,
    kernel: Kernel,
    features: ShaderFeatures,
    bounds_checks: bool,
) -> Pipeline {
    let label = kernel.label();
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(&label),
        source: wgpu::ShaderSource::Wgsl(kernel.source(features).into()),
    };
    let module = if bounds_checks {
        device.create_shader_module(desc)
    } else {
        // SAFETY: wgpu's checks guard against out-of-bounds accesses, loops
        // that never end and integer division by zero. Our kernels have
        // none of them, given what the host checks before each dispatch:
        // - every buffer holds at least the tensor view a dispatch covers
        //   (`Buffers::get`), plus one spare word for the unaligned u32
        //   reads of GGUF blocks;
        // - the contract's shape checks (`backend::check`) and the kernel
        //   limits in `GpuBackend`'s ops (head_dim <= 256, even F16 rows,
        //   cache rows >= ctx)
        //   hold, so every index a kernel derives from its parameters is in
        //   range, and invocations past the end return early;
        // - data-dependent indices (token ids, positions, slots) are
        //   clamped in the kernels;
        // - every loop is bounded by a parameter, and no dispatch is
        //   recorded with zero workgroups, so no divisor is zero.
        // The differential tests run with the checks on and off.
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: wgpu::BufferSize::new(PARAMS_BYTES),
        },
        count: None,
    }];
    for (i, b) in kernel.bindings().iter().enumerate() {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: b.access == Access::Read,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(&label),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(&label),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&label),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    Pipeline { pipeline, layout }
}
