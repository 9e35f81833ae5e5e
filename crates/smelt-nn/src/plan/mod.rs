//! Compiling a graph: the nodes the requested outputs and the updates
//! need, elementwise chains fused (`fuse`), an order (updates last), and
//! buffers planned by liveness: an intermediate's buffer is reused by a
//! later one once its last reader has run. Reshapes alias their input.
//! The plan is the same for every backend; each executes its steps.

pub mod fuse;

use std::collections::HashMap;

use crate::error::{NnError, Result};
use crate::graph::{Graph, Init, Node, Shape, Source, Value, numel};
use crate::ops::{Op, Shapes, Update};

/// Where a value lives at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loc {
    /// A planned intermediate buffer.
    Slot(usize),
    /// A variable of the plan (`Plan::variables`).
    Var(usize),
    /// A placeholder of the plan (`Plan::feeds`).
    Feed(usize),
}

#[derive(Clone, Debug)]
pub struct Step {
    pub op: Op,
    pub ins: Vec<Loc>,
    pub outs: Vec<Loc>,
    pub shapes: Shapes,
}

#[derive(Clone, Debug)]
pub struct FeedSpec {
    pub value: Value,
    pub name: String,
    pub shape: Shape,
    pub classes: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct VarSpec {
    pub name: String,
    pub shape: Shape,
    pub init: Init,
    pub trainable: bool,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Elements of each intermediate buffer.
    pub slots: Vec<usize>,
    pub feeds: Vec<FeedSpec>,
    pub variables: Vec<VarSpec>,
    /// The requested outputs: where each is and its shape.
    pub outputs: Vec<(Loc, Shape)>,
    /// Adam updates, each with two run-state words (`optim`).
    pub n_adam: usize,
}

impl Plan {
    pub fn compile(graph: &Graph, outputs: &[Value]) -> Result<Plan> {
        for &v in outputs {
            if v.index() >= graph.values.len() {
                return Err(NnError::Graph(format!("{v:?} is not of this graph")));
            }
        }
        let mut nodes = graph.nodes.clone();
        let needed = needed_nodes(graph, &nodes, outputs);
        fuse::fuse(graph, &mut nodes, &needed, outputs);
        let needed = needed_nodes(graph, &nodes, outputs);
        let mut order: Vec<usize> = needed
            .iter()
            .copied()
            .filter(|&i| !matches!(nodes[i].op, Op::Update(_)))
            .collect();
        order.extend(
            needed
                .iter()
                .copied()
                .filter(|&i| matches!(nodes[i].op, Op::Update(_))),
        );

        let mut b = Builder::default();
        // Placeholders and variables first, in value order.
        for &i in &order {
            for &v in &nodes[i].inputs {
                b.leaf(graph, v);
            }
        }
        for &v in outputs {
            b.leaf(graph, v);
        }
        // The last step that reads each value's buffer (its alias root).
        let mut last_use: HashMap<Value, usize> = HashMap::new();
        let mut root: HashMap<Value, Value> = HashMap::new();
        for (s, &i) in order.iter().enumerate() {
            let n = &nodes[i];
            if let Op::Reshape(_) = n.op {
                let r = *root.get(&n.inputs[0]).unwrap_or(&n.inputs[0]);
                root.insert(n.outputs[0], r);
            }
            for &v in n.inputs.iter().chain(&n.outputs) {
                let r = *root.get(&v).unwrap_or(&v);
                last_use.insert(r, s);
            }
        }
        for &v in outputs {
            let r = *root.get(&v).unwrap_or(&v);
            last_use.insert(r, usize::MAX);
        }
        let mut steps = Vec::with_capacity(order.len());
        let mut n_adam = 0;
        for (s, &i) in order.iter().enumerate() {
            let n = &nodes[i];
            let ins: Vec<Loc> = n.inputs.iter().map(|v| b.loc[v]).collect();
            let outs: Vec<Loc> = if let Op::Reshape(_) = n.op {
                vec![ins[0]]
            } else {
                n.outputs
                    .iter()
                    .map(|&v| Loc::Slot(b.alloc(numel(graph.shape(v)))))
                    .collect()
            };
            for (&v, &l) in n.outputs.iter().zip(&outs) {
                b.loc.insert(v, l);
            }
            let mut op = n.op.clone();
            if let Op::Update(u) = &mut op {
                check_targets(u, &ins)?;
                if let Update::Adam(a) = u {
                    a.slot = n_adam;
                    n_adam += 1;
                }
            }
            steps.push(Step {
                op,
                ins,
                outs,
                shapes: Shapes {
                    ins: n.inputs.iter().map(|&v| graph.shape(v).to_vec()).collect(),
                    outs: n.outputs.iter().map(|&v| graph.shape(v).to_vec()).collect(),
                },
            });
            // Free the buffers whose last reader was this step.
            for &v in n.inputs.iter().chain(&n.outputs) {
                let r = *root.get(&v).unwrap_or(&v);
                if last_use.get(&r) == Some(&s)
                    && let Some(Loc::Slot(slot)) = b.loc.get(&r).copied()
                    && !b.freed.contains(&slot)
                {
                    b.free(slot);
                }
            }
        }
        let outputs = outputs
            .iter()
            .map(|v| (b.loc[v], graph.shape(*v).to_vec()))
            .collect();
        Ok(Plan {
            steps,
            slots: b.slots,
            feeds: b.feeds,
            variables: b.vars,
            outputs,
            n_adam,
        })
    }

    /// Dispatch-free steps (reshapes) excluded.
    pub fn n_ops(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| !matches!(s.op, Op::Reshape(_)))
            .count()
    }
}

/// Nodes on a path to an output or an update, in graph order.
fn needed_nodes(graph: &Graph, nodes: &[Node], outputs: &[Value]) -> Vec<usize> {
    let mut need = vec![false; nodes.len()];
    let mut stack: Vec<usize> = Vec::new();
    let producer = |v: Value| match graph.values[v.index()].source {
        Source::Node { node, .. } => Some(node),
        _ => None,
    };
    for &v in outputs {
        stack.extend(producer(v));
    }
    for (i, n) in nodes.iter().enumerate() {
        if matches!(n.op, Op::Update(_)) {
            stack.push(i);
        }
    }
    while let Some(i) = stack.pop() {
        if need[i] {
            continue;
        }
        need[i] = true;
        for &v in &nodes[i].inputs {
            stack.extend(producer(v));
        }
    }
    (0..nodes.len()).filter(|&i| need[i]).collect()
}

fn check_targets(u: &Update, ins: &[Loc]) -> Result<()> {
    for l in &ins[..u.n_targets()] {
        if !matches!(l, Loc::Var(_)) {
            return Err(NnError::Graph(format!(
                "{} writes a value that is not a variable",
                u.name()
            )));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Builder {
    loc: HashMap<Value, Loc>,
    feeds: Vec<FeedSpec>,
    vars: Vec<VarSpec>,
    slots: Vec<usize>,
    free_slots: Vec<usize>,
    freed: Vec<usize>,
}

impl Builder {
    fn leaf(&mut self, graph: &Graph, v: Value) {
        if self.loc.contains_key(&v) {
            return;
        }
        let info = graph.info(v);
        match &info.source {
            Source::Placeholder { name, classes } => {
                self.feeds.push(FeedSpec {
                    value: v,
                    name: name.clone(),
                    shape: info.shape.clone(),
                    classes: *classes,
                });
                self.loc.insert(v, Loc::Feed(self.feeds.len() - 1));
            }
            Source::Variable {
                name,
                init,
                trainable,
            } => {
                self.vars.push(VarSpec {
                    name: name.clone(),
                    shape: info.shape.clone(),
                    init: *init,
                    trainable: *trainable,
                });
                self.loc.insert(v, Loc::Var(self.vars.len() - 1));
            }
            Source::Node { .. } => {}
        }
    }

    /// A buffer of at least `len` elements: the smallest free one that
    /// holds it, else the largest free one grown, else a new one.
    fn alloc(&mut self, len: usize) -> usize {
        let fits = self
            .free_slots
            .iter()
            .enumerate()
            .filter(|(_, s)| self.slots[**s] >= len)
            .min_by_key(|(_, s)| self.slots[**s]);
        let pick = match fits {
            Some((k, _)) => Some(k),
            None => self
                .free_slots
                .iter()
                .enumerate()
                .max_by_key(|(_, s)| self.slots[**s])
                .map(|(k, _)| k),
        };
        match pick {
            Some(k) => {
                let slot = self.free_slots.swap_remove(k);
                self.freed.retain(|&s| s != slot);
                self.slots[slot] = self.slots[slot].max(len);
                slot
            }
            None => {
                self.slots.push(len);
                self.slots.len() - 1
            }
        }
    }

    fn free(&mut self, slot: usize) {
        self.free_slots.push(slot);
        self.freed.push(slot);
    }
}
