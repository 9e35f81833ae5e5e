//! smelt: large language model inference on GPUs (through wgpu: Metal,
//! Vulkan, DX12, WebGPU) and CPUs, from GGUF files.
//!
//! Read `ARCHITECTURE.md` at the repository root first.

pub mod backend;
pub mod chat;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod model;
pub mod quant;
pub mod quantize;
pub mod sample;
pub mod server;
pub mod tokenizer;
