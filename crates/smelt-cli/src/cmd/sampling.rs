//! The sampling flags of `smelt run` and `smelt chat`, with llama.cpp's
//! defaults.

use smelt::sample::SamplerParams;

#[derive(clap::Args, Clone, Debug)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Sample from the K most likely tokens only; 0 keeps all
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Sample from the smallest set of tokens whose probabilities add up to
    /// P; 1 keeps all
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one; 0 keeps
    /// all
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalty on tokens among the last 64; 1 is off
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Seed of the sampler, for repeatable output (default: from the clock)
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler's settings, checked; the error names the bad flag.
    pub fn params(&self) -> anyhow::Result<SamplerParams> {
        let sampler = SamplerParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed: self.seed,
            ..SamplerParams::default()
        };
        sampler
            .validate()
            .map_err(|e| anyhow::anyhow!("bad sampling flags: {e}"))?;
        Ok(sampler)
    }
}
