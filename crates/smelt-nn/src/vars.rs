//! Variables: kept by a device between runs, by name, so that graphs
//! compiled on the same device (training, evaluation, sampling) share them.

use std::collections::HashMap;

use crate::graph::{Init, Shape};

#[derive(Default)]
pub struct Vars {
    pub(crate) names: HashMap<String, usize>,
    pub(crate) shapes: Vec<Shape>,
    pub(crate) order: Vec<String>,
    /// The values, on the CPU backend (empty on the GPU, which keeps
    /// buffers).
    pub(crate) data: Vec<Vec<f32>>,
}

/// SplitMix64: the generator of initial values and of data shuffles.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = (self.uniform() as f64).max(1e-12);
        let u2 = self.uniform() as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    /// An index in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// FNV-1a of a name, to give each variable its own stream.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A variable's first values: the same for a seed and name on every
/// backend.
pub fn initial_values(init: Init, n: usize, seed: u64, name: &str) -> Vec<f32> {
    let mut rng = Rng::new(seed ^ name_hash(name));
    (0..n)
        .map(|_| match init {
            Init::Zeros => 0.0,
            Init::Const(c) => c,
            Init::Uniform(b) => (2.0 * rng.uniform() - 1.0) * b,
            Init::Normal(s) => rng.normal() * s,
        })
        .collect()
}
