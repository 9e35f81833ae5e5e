//! The GPU backend on wgpu: WGSL kernels, recorded into one submission per
//! forward pass.
