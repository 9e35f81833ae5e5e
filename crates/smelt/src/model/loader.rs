//! Loads weights into a backend by GGUF name, checking each tensor's shape
//! against the config and that the backend can run it; zero copy where the
//! backend keeps the file's bytes.
//!
//! Fused tensors are split by rows at load, without a copy: `attn_qkv`
//! (Q's rows, then K's, then V's) and a gate-and-up `ffn_up` (gate's rows,
//! then up's), so the forward pass sees the same weights whichever way a
//! converter wrote them. Expert stacks (`ffn_*_exps`, GGUF dims `[k, m,
//! n_expert]`) load as one `(n_expert·m) × k` tensor.

use super::ModelError;
use crate::backend::{Backend, Op, Tensor, WeightInput};
use crate::gguf::GgufFile;
use crate::quant::GgmlType;

/// Loads weights by GGUF name; `progress(done, total)` counts bytes.
pub struct Loader<'a> {
    pub file: &'a GgufFile,
    pub backend: &'a mut dyn Backend,
    pub progress: &'a mut dyn FnMut(u64, u64),
    pub done: u64,
    pub total: u64,
}

impl Loader<'_> {
    /// A required tensor of `rows × cols`, used as `op`'s typed input.
    pub fn tensor(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        op: Op,
    ) -> Result<Tensor, ModelError> {
        self.optional(name, rows, cols, op)?
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })
    }

    pub fn optional(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
        op: Op,
    ) -> Result<Option<Tensor>, ModelError> {
        self.optional_dims(name, &[cols, rows], op)
    }

    /// A required stack of `n_expert` weights of `rows × cols`, as one
    /// `(n_expert·rows) × cols` tensor.
    pub fn experts(
        &mut self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Tensor, ModelError> {
        self.optional_dims(name, &[cols, rows, n_expert], Op::MatMulId)?
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })
    }

    fn optional_dims(
        &mut self,
        name: &str,
        dims: &[usize],
        op: Op,
    ) -> Result<Option<Tensor>, ModelError> {
        let Some(w) = self.input(name, dims, op)? else {
            return Ok(None);
        };
        let bytes = w.data.len() as u64;
        let t = self
            .backend
            .load_weight(&w.name, w.dtype, w.rows, w.cols, w.data)?;
        self.loaded(bytes);
        Ok(Some(t))
    }

    /// Weights of one input, `(name, rows)` of `cols` each, that
    /// [`Backend::matmuls`] takes together (Q, K, V; gate, up): loaded
    /// through [`Backend::load_joined`], which may place them side by side.
    pub fn joined<const N: usize>(
        &mut self,
        names: [(&str, usize); N],
        cols: usize,
    ) -> Result<[Tensor; N], ModelError> {
        let mut ws = Vec::with_capacity(N);
        for (name, rows) in names {
            let w = self
                .input(name, &[cols, rows], Op::MatMul)?
                .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
            ws.push(w);
        }
        self.load_joined(ws)
    }

    /// The parts of the fused tensor `name` (`Σ rows × cols`, the parts'
    /// rows one after the other), loaded as [`Loader::joined`] loads
    /// separate ones; `None` where the file has no such tensor. `op` is
    /// `Add` for a fused bias (one row: the parts are its columns).
    pub fn split<const N: usize>(
        &mut self,
        name: &str,
        parts: [usize; N],
        cols: usize,
        op: Op,
    ) -> Result<Option<[Tensor; N]>, ModelError> {
        let total: usize = parts.iter().sum();
        let bias = op == Op::Add;
        let dims = if bias { [total, 1] } else { [cols, total] };
        let Some(w) = self.input(name, &dims, op)? else {
            return Ok(None);
        };
        let unit = if bias {
            w.dtype.row_bytes(1)
        } else {
            w.dtype.row_bytes(cols)
        };
        let unit = unit.ok_or_else(|| {
            ModelError::Param(format!(
                "{name}: {} rows of {cols} are not whole blocks",
                w.dtype
            ))
        })?;
        let mut ws = Vec::with_capacity(N);
        let mut at = 0;
        for (i, &n) in parts.iter().enumerate() {
            let data = w
                .data
                .slice(at * unit..(at + n) * unit)
                .ok_or_else(|| ModelError::Param(format!("{name}: part {i} past its end")))?;
            at += n;
            let (rows, cols) = if bias { (1, n) } else { (n, cols) };
            ws.push(WeightInput {
                name: format!("{name}[{i}]"),
                dtype: w.dtype,
                rows,
                cols,
                data,
            });
        }
        if bias {
            let mut ts = Vec::with_capacity(N);
            for w in ws {
                let bytes = w.data.len() as u64;
                ts.push(
                    self.backend
                        .load_weight(&w.name, w.dtype, w.rows, w.cols, w.data)?,
                );
                self.loaded(bytes);
            }
            return Ok(Some(ts.try_into().map_err(|_| {
                ModelError::Param(format!("{name}: split into the wrong count"))
            })?));
        }
        self.load_joined(ws).map(Some)
    }

    fn load_joined<const N: usize>(
        &mut self,
        ws: Vec<WeightInput>,
    ) -> Result<[Tensor; N], ModelError> {
        let ts = self.backend.load_joined(&ws)?;
        self.loaded(ws.iter().map(|w| w.data.len() as u64).sum());
        ts.try_into().map_err(|ts: Vec<Tensor>| {
            ModelError::Param(format!(
                "the {} backend loaded {} of {N} joined weights",
                self.backend.name(),
                ts.len()
            ))
        })
    }

    /// The output projection: `output.weight` (`V × E`), or `token_embd`
    /// when the file ties them.
    pub fn output(&mut self, token_embd: Tensor) -> Result<Tensor, ModelError> {
        let (v, e) = (token_embd.rows, token_embd.cols);
        match self.optional("output.weight", v, e, Op::MatMul)? {
            Some(o) => Ok(o),
            // Tied embeddings: the table must also work as a matmul weight.
            None if self.backend.supports(Op::MatMul, token_embd.dtype) => Ok(token_embd),
            None => Err(ModelError::UnsupportedType {
                name: "token_embd.weight (as the tied output)".into(),
                dtype: token_embd.dtype,
                backend: self.backend.name(),
            }),
        }
    }

    /// Whether the file has the tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    /// The file's tensor `name` as a weight to load, having checked its
    /// GGUF dims (`dims[0]` the row length; trailing 1s allowed) and that
    /// the backend runs `op` on its type; `None` where the file has no such
    /// tensor. The weight is `dims[1..]`'s product of rows.
    fn input(&self, name: &str, dims: &[usize], op: Op) -> Result<Option<WeightInput>, ModelError> {
        let Some(info) = self.file.tensor_info(name) else {
            return Ok(None);
        };
        let found: Vec<u64> = info.dims.to_vec();
        let shape_ok = (0..found.len().max(dims.len()))
            .all(|i| found.get(i).copied().unwrap_or(1) == dims.get(i).map_or(1, |&d| d as u64));
        if !shape_ok {
            return Err(ModelError::TensorShape {
                name: name.into(),
                expected: dims.iter().map(|&d| d as u64).collect(),
                found,
            });
        }
        // Norms and factors are plain values the element-wise ops read.
        let plain = matches!(op, Op::RmsNorm | Op::Rope | Op::Add);
        let ok = if plain {
            info.dtype == GgmlType::F32
        } else {
            self.backend.supports(op, info.dtype)
        };
        if !ok {
            return Err(ModelError::UnsupportedType {
                name: name.into(),
                dtype: info.dtype,
                backend: self.backend.name(),
            });
        }
        Ok(Some(WeightInput {
            name: name.into(),
            dtype: info.dtype,
            rows: dims[1..].iter().product(),
            cols: dims[0],
            data: self.file.tensor_bytes(name)?,
        }))
    }

    fn loaded(&mut self, bytes: u64) {
        self.done += bytes;
        (self.progress)(self.done, self.total);
    }
}
