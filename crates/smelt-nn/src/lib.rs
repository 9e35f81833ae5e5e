//! smelt-nn: neural-network primitives on smelt's wgpu device and CPU
//! threads, a graph compiled once and run as one submission per step, and
//! reverse-mode autodiff, for training and running CNNs and RNNs.
//!
//! - `graph` + `layers`: build a graph of placeholders, variables and ops.
//! - `autodiff`: `Graph::gradients` adds the backward graph.
//! - `plan`: compile (fusion, order, buffer planning), shared by backends.
//! - `ops`: the op families, each with its CPU twin and WGSL kernel.
//! - `cpu`, `gpu`: the two backends; `device`: the one API over both.
//! - `safetensors`, `data`, `models`, `plot`: checkpoints, the example data
//!   sets, the example models and loss curves.

pub mod autodiff;
pub mod cpu;
pub mod data;
pub mod device;
pub mod error;
pub mod gpu;
pub mod graph;
pub mod layers;
pub mod models;
pub mod ops;
pub mod plan;
pub mod plot;
pub mod safetensors;
pub mod train;
pub mod vars;

pub use device::{Device, Executable};
pub use error::{NnError, Result};
pub use graph::{Graph, Init, Value};
