//! The CPU engine: reference ops, the fast CPU backend against them, the
//! Llama forward pass against llama.cpp, generation and the CLI.

#[path = "../common/mod.rs"]
mod common;

mod ops;
