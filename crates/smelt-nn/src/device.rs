//! A device: the CPU backend or the GPU backend, the variables kept on it,
//! and the graphs compiled for it. Model code builds a graph once and runs
//! it on either through the same calls.

use std::collections::HashMap;

use smelt::backend::gpu::GpuOptions;

use crate::cpu::{CpuDevice, CpuExec, RunState};
use crate::error::{NnError, Result};
use crate::gpu::{GpuDevice, GpuExec, Stats};
use crate::graph::{Graph, Shape, Value, numel};
use crate::ops::map::hash32;
use crate::ops::{Op, Update};
use crate::plan::Plan;
use crate::vars::{Vars, initial_values};

enum Backend {
    Cpu(CpuDevice),
    Gpu(Box<GpuDevice>),
}

pub struct Device {
    backend: Backend,
    vars: Vars,
    seed: u64,
}

enum Exec {
    Cpu(CpuExec),
    Gpu(GpuExec),
}

/// A graph compiled for a device.
pub struct Executable {
    plan: Plan,
    var_ids: Vec<usize>,
    exec: Exec,
    feed_of: HashMap<Value, usize>,
    runs: u32,
}

impl Executable {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Dispatches (GPU) or ops (CPU) per run.
    pub fn ops_per_run(&self) -> usize {
        match &self.exec {
            Exec::Cpu(_) => self.plan.n_ops(),
            Exec::Gpu(g) => g.dispatches(),
        }
    }

    /// Runs so far: the next run's Adam step is this plus one.
    pub fn runs(&self) -> u32 {
        self.runs
    }
}

impl Device {
    /// The CPU backend on `threads` threads; `seed` draws the variables'
    /// first values and dropout's masks.
    pub fn cpu(threads: usize, seed: u64) -> Result<Self> {
        Ok(Device {
            backend: Backend::Cpu(CpuDevice::new(threads)?),
            vars: Vars::default(),
            seed,
        })
    }

    /// The GPU backend on the adapter `opts` selects.
    pub fn gpu(opts: &GpuOptions, seed: u64) -> Result<Self> {
        Ok(Device {
            backend: Backend::Gpu(Box::new(GpuDevice::new(opts)?)),
            vars: Vars::default(),
            seed,
        })
    }

    pub fn name(&self) -> String {
        match &self.backend {
            Backend::Cpu(c) => format!("CPU ({} threads)", c.threads()),
            Backend::Gpu(g) => g.name(),
        }
    }

    pub fn is_gpu(&self) -> bool {
        matches!(self.backend, Backend::Gpu(_))
    }

    /// Submissions and dispatches so far (zero on the CPU).
    pub fn stats(&self) -> Stats {
        match &self.backend {
            Backend::Cpu(_) => Stats::default(),
            Backend::Gpu(g) => g.stats,
        }
    }

    /// Compiles `g` to compute `outputs` (and run its updates). Variables
    /// new to the device get their first values.
    pub fn compile(&mut self, g: &Graph, outputs: &[Value]) -> Result<Executable> {
        let plan = Plan::compile(g, outputs)?;
        let mut var_ids = Vec::with_capacity(plan.variables.len());
        for v in &plan.variables {
            let id = match self.vars.names.get(&v.name) {
                Some(&id) => {
                    if self.vars.shapes[id] != v.shape {
                        return Err(NnError::Graph(format!(
                            "variable {} is {:?} on the device, {:?} in this graph",
                            v.name, self.vars.shapes[id], v.shape
                        )));
                    }
                    id
                }
                None => {
                    let data = initial_values(v.init, numel(&v.shape), self.seed, &v.name);
                    match &mut self.backend {
                        Backend::Cpu(_) => self.vars.data.push(data),
                        Backend::Gpu(gpu) => gpu.new_var(&v.name, &data)?,
                    }
                    let id = self.vars.shapes.len();
                    self.vars.names.insert(v.name.clone(), id);
                    self.vars.shapes.push(v.shape.clone());
                    self.vars.order.push(v.name.clone());
                    id
                }
            };
            var_ids.push(id);
        }
        let exec = match &mut self.backend {
            Backend::Cpu(_) => Exec::Cpu(CpuExec::new(&plan)),
            Backend::Gpu(gpu) => Exec::Gpu(GpuExec::new(gpu, &plan, &var_ids)?),
        };
        let feed_of = plan
            .feeds
            .iter()
            .enumerate()
            .map(|(i, f)| (f.value, i))
            .collect();
        Ok(Executable {
            plan,
            var_ids,
            exec,
            feed_of,
            runs: 0,
        })
    }

    /// One run: feeds every placeholder, returns the outputs' values.
    pub fn run(
        &mut self,
        exe: &mut Executable,
        feeds: &[(Value, &[f32])],
    ) -> Result<Vec<Vec<f32>>> {
        let mut ordered: Vec<Option<&[f32]>> = vec![None; exe.plan.feeds.len()];
        for &(v, data) in feeds {
            let Some(&i) = exe.feed_of.get(&v) else {
                return Err(NnError::Feed(format!(
                    "{v:?} is not a placeholder this graph reads"
                )));
            };
            let spec = &exe.plan.feeds[i];
            if data.len() != numel(&spec.shape) {
                return Err(NnError::Feed(format!(
                    "{}: {} values for shape {:?}",
                    spec.name,
                    data.len(),
                    spec.shape
                )));
            }
            if let Some(classes) = spec.classes
                && let Some(bad) = data
                    .iter()
                    .find(|&&x| !(x >= 0.0 && x < classes as f32 && x.fract() == 0.0))
            {
                return Err(NnError::Feed(format!(
                    "{}: {bad} is not an index in 0..{classes}",
                    spec.name
                )));
            }
            ordered[i] = Some(data);
        }
        let feeds: Vec<&[f32]> = ordered
            .iter()
            .zip(&exe.plan.feeds)
            .map(|(d, spec)| d.ok_or_else(|| NnError::Feed(format!("{} was not fed", spec.name))))
            .collect::<Result<_>>()?;
        exe.runs += 1;
        let run = RunState {
            step: exe.runs,
            seed: hash32((self.seed as u32) ^ hash32(exe.runs ^ ((self.seed >> 32) as u32))),
            adam: exe
                .plan
                .steps
                .iter()
                .filter_map(|s| match &s.op {
                    Op::Update(Update::Adam(a)) => Some(a.run_words(exe.runs)),
                    _ => None,
                })
                .collect(),
        };
        match (&mut self.backend, &mut exe.exec) {
            (Backend::Cpu(cpu), Exec::Cpu(e)) => {
                e.run(cpu, &mut self.vars, &exe.plan, &exe.var_ids, &feeds, &run)
            }
            (Backend::Gpu(gpu), Exec::Gpu(e)) => e.run(gpu, &exe.var_ids, &feeds, &run),
            _ => Err(NnError::Graph(
                "an executable runs on the device it was compiled for".into(),
            )),
        }
    }

    /// On the GPU, the time of each kernel of one run of `exe` (run first
    /// so its inputs are written), each dispatch timed on its own; `None`
    /// on the CPU.
    pub fn profile(&mut self, exe: &Executable) -> Result<Option<Vec<(String, f64, usize)>>> {
        match (&mut self.backend, &exe.exec) {
            (Backend::Gpu(gpu), Exec::Gpu(e)) => Ok(Some(e.profile(gpu)?)),
            _ => Ok(None),
        }
    }

    /// The variables on the device, in the order they were made.
    pub fn variables(&self) -> Vec<(String, Shape)> {
        self.vars
            .order
            .iter()
            .map(|n| (n.clone(), self.vars.shapes[self.vars.names[n]].clone()))
            .collect()
    }

    pub fn read_variable(&mut self, name: &str) -> Result<Vec<f32>> {
        let id = self.var_id(name)?;
        match &mut self.backend {
            Backend::Cpu(_) => Ok(self.vars.data[id].clone()),
            Backend::Gpu(g) => g.read_var(id, numel(&self.vars.shapes[id])),
        }
    }

    /// Overwrites a variable (a checkpoint's values).
    pub fn write_variable(&mut self, name: &str, data: &[f32]) -> Result<()> {
        let id = self.var_id(name)?;
        if data.len() != numel(&self.vars.shapes[id]) {
            return Err(NnError::Feed(format!(
                "{name}: {} values for shape {:?}",
                data.len(),
                self.vars.shapes[id]
            )));
        }
        match &mut self.backend {
            Backend::Cpu(_) => self.vars.data[id].copy_from_slice(data),
            Backend::Gpu(g) => g.write_var(id, data),
        }
        Ok(())
    }

    fn var_id(&self, name: &str) -> Result<usize> {
        self.vars
            .names
            .get(name)
            .copied()
            .ok_or_else(|| NnError::Graph(format!("no variable {name} on the device")))
    }
}
