//! Reverse-mode automatic differentiation: the backward graph is built
//! into the same graph, node by node in reverse order from the loss, each
//! op's rule (`Op::backward`) making its inputs' gradients from its
//! outputs'. Gradients that meet at a value are added.

use std::collections::HashMap;

use crate::error::{NnError, Result};
use crate::graph::{Graph, Source, Value};
use crate::ops::Backward;

impl Graph {
    /// The gradients of the scalar `loss` with respect to `wrt` (zeros for
    /// a value the loss does not depend on).
    pub fn gradients(&mut self, loss: Value, wrt: &[Value]) -> Result<Vec<Value>> {
        if self.shape(loss).iter().product::<usize>() != 1 {
            return Err(NnError::Graph(format!(
                "the loss must be a scalar, not {:?}",
                self.shape(loss)
            )));
        }
        // Which values depend on a `wrt` value.
        let mut depends = vec![false; self.values.len()];
        for &v in wrt {
            depends[v.index()] = true;
        }
        let n_nodes = self.nodes.len();
        for i in 0..n_nodes {
            let node = &self.nodes[i];
            if node.inputs.iter().any(|v| depends[v.index()]) {
                for &o in &node.outputs {
                    depends[o.index()] = true;
                }
            }
        }
        let loss_node = match self.values[loss.index()].source {
            Source::Node { node, .. } => node,
            _ => n_nodes,
        };
        let mut pending: HashMap<Value, Vec<Value>> = HashMap::new();
        let one = self.constant(self.shape(loss).to_vec().as_slice(), 1.0)?;
        pending.insert(loss, vec![one]);
        for i in (0..n_nodes.min(loss_node + 1)).rev() {
            let node = self.nodes[i].clone();
            if !node.outputs.iter().any(|o| pending.contains_key(o)) {
                continue;
            }
            let needs: Vec<bool> = node.inputs.iter().map(|v| depends[v.index()]).collect();
            if !needs.iter().any(|&n| n) {
                continue;
            }
            let mut grads = Vec::with_capacity(node.outputs.len());
            for o in &node.outputs {
                grads.push(match pending.get(o).cloned() {
                    Some(parts) => Some(self.sum_all(&parts)?),
                    None => None,
                });
            }
            let input_grads = node.op.backward(
                self,
                &Backward {
                    inputs: &node.inputs,
                    outputs: &node.outputs,
                    grads: &grads,
                    needs: &needs,
                },
            )?;
            for ((&v, g), &need) in node.inputs.iter().zip(input_grads).zip(&needs) {
                if let (Some(g), true) = (g, need) {
                    pending.entry(v).or_default().push(g);
                }
            }
        }
        wrt.iter()
            .map(|v| match pending.get(v).cloned() {
                Some(parts) => self.sum_all(&parts),
                None => {
                    let shape = self.shape(*v).to_vec();
                    self.constant(&shape, 0.0)
                }
            })
            .collect()
    }

    /// The sum of gradient parts, in the order they were made.
    fn sum_all(&mut self, parts: &[Value]) -> Result<Value> {
        let mut acc = parts[0];
        for &p in &parts[1..] {
            acc = self.add(acc, p)?;
        }
        Ok(acc)
    }
}
