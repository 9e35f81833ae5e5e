//! Elementwise fusion, a rule over the graph: a map whose output is read
//! only by one other map, in full, is inlined into that map, so the chain
//! runs as one kernel and its intermediates never reach memory. The fused
//! program performs the same f32 operations in the same order.

use crate::graph::{Graph, Node, Source, Value};
use crate::ops::{MapOp, Op};

/// Storage bindings a fused kernel may have besides its output and the run
/// state (WebGPU guarantees 8 per stage).
pub const MAX_INPUTS: usize = 6;
/// Instructions a fused program may have.
const MAX_CODE: usize = 96;

/// Fuses the needed nodes' map chains in place; inlined producers are left
/// unreferenced (the plan drops them).
pub fn fuse(graph: &Graph, nodes: &mut [Node], needed: &[usize], outputs: &[Value]) {
    let mut uses = vec![0usize; graph.values.len()];
    for &i in needed {
        for &v in &nodes[i].inputs {
            uses[v.index()] += 1;
        }
    }
    for &v in outputs {
        uses[v.index()] += 1;
    }
    for &c in needed {
        while let Some((k, p)) = inlinable(graph, nodes, c, &uses) {
            let (Op::Map(consumer), Op::Map(producer)) = (&nodes[c].op, &nodes[p].op) else {
                unreachable!("inlinable returns maps");
            };
            let (mut fused, kept) = consumer.inline(k, producer);
            let joined: Vec<Value> = nodes[c]
                .inputs
                .iter()
                .chain(&nodes[p].inputs)
                .copied()
                .collect();
            let mut inputs: Vec<Value> = kept.iter().map(|&j| joined[j]).collect();
            dedupe(&mut fused, &mut inputs);
            if inputs.len() > MAX_INPUTS || fused.code.len() > MAX_CODE {
                break;
            }
            // The producer's inputs are now read by the consumer instead.
            for &v in &nodes[p].inputs {
                uses[v.index()] -= 1;
            }
            for &v in &inputs {
                uses[v.index()] += 1;
            }
            for &v in &nodes[c].inputs {
                uses[v.index()] -= 1;
            }
            nodes[c].op = Op::Map(fused);
            nodes[c].inputs = inputs;
        }
    }
}

/// An input `k` of map node `c` made by a map read nowhere else, in full.
fn inlinable(graph: &Graph, nodes: &[Node], c: usize, uses: &[usize]) -> Option<(usize, usize)> {
    let Op::Map(consumer) = &nodes[c].op else {
        return None;
    };
    let n = consumer.len();
    for (k, &v) in nodes[c].inputs.iter().enumerate() {
        let Source::Node { node: p, .. } = graph.values[v.index()].source else {
            continue;
        };
        let Op::Map(producer) = &nodes[p].op else {
            continue;
        };
        if uses[v.index()] == 1 && consumer.bcast[k].is_full(n) && producer.len() == n {
            return Some((k, p));
        }
    }
    None
}

/// Merges inputs that read the same value the same way.
fn dedupe(m: &mut MapOp, inputs: &mut Vec<Value>) {
    let mut keep: Vec<usize> = Vec::new();
    let mut remap = vec![0u16; inputs.len()];
    for k in 0..inputs.len() {
        match keep
            .iter()
            .position(|&j| inputs[j] == inputs[k] && m.bcast[j] == m.bcast[k])
        {
            Some(pos) => remap[k] = pos as u16,
            None => {
                remap[k] = keep.len() as u16;
                keep.push(k);
            }
        }
    }
    for ins in &mut m.code {
        if let crate::ops::Instr::Input(j) = ins {
            *j = remap[*j as usize];
        }
    }
    m.bcast = keep.iter().map(|&k| m.bcast[k]).collect();
    *inputs = keep.iter().map(|&k| inputs[k]).collect();
}
