//! The graph: values (placeholders, variables, op outputs) and the nodes
//! that make them, built by the methods of `layers` and differentiated by
//! `autodiff`. Shapes are inferred as nodes are added, so a graph that was
//! built has consistent shapes; `plan` compiles it.
//!
//! Shapes: images are `[N, C, H, W]` (batch, channels, rows, columns),
//! sequences `[T, B, D]` (time, batch, features), matrices `[M, K]`; the
//! last dimension is contiguous.

use crate::error::{NnError, Result};
use crate::ops::Op;

pub type Shape = Vec<usize>;

/// A tensor of the graph (f32): a placeholder, a variable or an op output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub(crate) u32);

impl Value {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a variable's first values are drawn (from the device's seed and the
/// variable's name, so every backend starts from the same numbers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Zeros,
    Const(f32),
    /// Uniform in `[-bound, bound]`.
    Uniform(f32),
    /// Normal with this standard deviation.
    Normal(f32),
}

#[derive(Clone, Debug)]
pub enum Source {
    /// Fed by the caller on every run; `classes`: the values must be
    /// integers in `0..classes` (labels, token ids), checked at each run.
    Placeholder {
        name: String,
        classes: Option<usize>,
    },
    /// Kept by the device between runs, by name; `trainable` ones are what
    /// `Graph::trainable` lists (not, e.g., batch norm's running stats).
    Variable {
        name: String,
        init: Init,
        trainable: bool,
    },
    /// Output `index` of node `node`.
    Node { node: usize, index: usize },
}

#[derive(Clone, Debug)]
pub struct ValueInfo {
    pub shape: Shape,
    pub source: Source,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<Value>,
    pub outputs: Vec<Value>,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) values: Vec<ValueInfo>,
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    fn new_value(&mut self, shape: Shape, source: Source) -> Value {
        self.values.push(ValueInfo { shape, source });
        Value(self.values.len() as u32 - 1)
    }

    /// An input fed on every run.
    pub fn placeholder(&mut self, name: &str, shape: &[usize]) -> Result<Value> {
        if self.find(name).is_some() {
            return Err(NnError::Graph(format!("the name {name:?} is taken")));
        }
        check_shape("placeholder", shape)?;
        Ok(self.new_value(
            shape.to_vec(),
            Source::Placeholder {
                name: name.into(),
                classes: None,
            },
        ))
    }

    /// An input of indices (class labels, token ids) in `0..classes`, fed as
    /// f32 integers.
    pub fn index_placeholder(
        &mut self,
        name: &str,
        shape: &[usize],
        classes: usize,
    ) -> Result<Value> {
        let v = self.placeholder(name, shape)?;
        if classes == 0 || classes > 1 << 24 {
            return crate::error::shape_err("placeholder", format!("{classes} classes"));
        }
        self.values[v.index()].source = Source::Placeholder {
            name: name.into(),
            classes: Some(classes),
        };
        Ok(v)
    }

    /// A trainable variable (a parameter).
    pub fn parameter(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Value> {
        self.variable(name, shape, init, true)
    }

    /// A variable kept by the device between runs. The same name in another
    /// graph on the same device is the same memory.
    pub fn variable(
        &mut self,
        name: &str,
        shape: &[usize],
        init: Init,
        trainable: bool,
    ) -> Result<Value> {
        if self.find(name).is_some() {
            return Err(NnError::Graph(format!("the name {name:?} is taken")));
        }
        check_shape("variable", shape)?;
        Ok(self.new_value(
            shape.to_vec(),
            Source::Variable {
                name: name.into(),
                init,
                trainable,
            },
        ))
    }

    /// The placeholder or variable of this name.
    pub fn find(&self, name: &str) -> Option<Value> {
        self.values
            .iter()
            .position(|v| match &v.source {
                Source::Placeholder { name: n, .. } | Source::Variable { name: n, .. } => n == name,
                Source::Node { .. } => false,
            })
            .map(|i| Value(i as u32))
    }

    pub fn shape(&self, v: Value) -> &[usize] {
        &self.values[v.index()].shape
    }

    pub fn info(&self, v: Value) -> &ValueInfo {
        &self.values[v.index()]
    }

    /// The trainable variables, in the order they were made.
    pub fn trainable(&self) -> Vec<Value> {
        (0..self.values.len())
            .filter(|&i| {
                matches!(
                    self.values[i].source,
                    Source::Variable {
                        trainable: true,
                        ..
                    }
                )
            })
            .map(|i| Value(i as u32))
            .collect()
    }

    /// Adds a node, inferring its outputs' shapes.
    pub(crate) fn add_node(&mut self, op: Op, inputs: &[Value]) -> Result<Vec<Value>> {
        for &v in inputs {
            if v.index() >= self.values.len() {
                return Err(NnError::Graph(format!("{v:?} is not of this graph")));
            }
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|&v| self.shape(v)).collect();
        let out_shapes = op.infer(&shapes)?;
        let node = self.nodes.len();
        let outputs = out_shapes
            .into_iter()
            .enumerate()
            .map(|(index, shape)| self.new_value(shape, Source::Node { node, index }))
            .collect::<Vec<_>>();
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// Adds a node of one output.
    pub(crate) fn node1(&mut self, op: Op, inputs: &[Value]) -> Result<Value> {
        let out = self.add_node(op, inputs)?;
        debug_assert_eq!(out.len(), 1);
        Ok(out[0])
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
}

fn check_shape(what: &'static str, shape: &[usize]) -> Result<()> {
    if shape.is_empty() || shape.contains(&0) {
        return crate::error::shape_err(what, format!("shape {shape:?} has no elements"));
    }
    if shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .is_none_or(|n| n > 1 << 31)
    {
        return crate::error::shape_err(what, format!("shape {shape:?} is too large"));
    }
    Ok(())
}
