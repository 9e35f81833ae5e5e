//! Sampling: greedy, temperature, top-k, top-p, min-p, the repetition,
//! frequency and presence penalties and logit biases, with a seeded
//! generator; and the log-probabilities of what was sampled.
//!
//! The chain and its order follow llama.cpp's default sampler: logit
//! biases, penalties, top-k, top-p, min-p, temperature, then a draw from
//! the distribution. A temperature of zero (or below) is greedy: the
//! largest logit after the biases and penalties, the lowest id on ties.
//!
//! Log-probabilities ([`logprobs`]) are those of the model: the
//! log-softmax of its raw logits, before any bias, penalty or filter, as
//! llama.cpp's server reports them.

/// Sampling settings. `Default` gives llama.cpp's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// 0 (or below) means greedy.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p`; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely; 0 keeps all.
    pub min_p: f32,
    /// Divides positive logits (multiplies negative ones) of recent tokens;
    /// 1 is off.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at; 0 disables them.
    pub repeat_last_n: usize,
    /// Subtracted once per earlier occurrence of a token.
    pub frequency_penalty: f32,
    /// Subtracted once from every token that occurred.
    pub presence_penalty: f32,
    /// Fixes the random stream; `None` seeds from the clock.
    pub seed: Option<u64>,
    /// Added to the logits of these tokens before anything else (OpenAI's
    /// `logit_bias`; -100 all but bans a token).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (temperature 0), no penalties.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    fn has_penalties(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }

    /// Checks the ranges; the message names the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        let finite = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repeat_penalty", self.repeat_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ];
        if let Some((name, v)) = finite.iter().find(|(_, v)| !v.is_finite()) {
            return Err(format!("{name} must be a finite number, got {v}"));
        }
        if let Some((id, b)) = self.logit_bias.iter().find(|(_, b)| !b.is_finite()) {
            return Err(format!(
                "logit_bias of token {id} must be a finite number, got {b}"
            ));
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(format!("top_p must be in [0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if self.repeat_penalty <= 0.0 {
            return Err(format!(
                "repeat_penalty must be positive, got {}",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// A sampler with its own random stream.
pub struct Sampler {
    params: SamplerParams,
    rng: SplitMix64,
    /// Reused between calls: (token, logit) candidates.
    candidates: Vec<(u32, f32)>,
    /// Reused between calls: occurrence counts of recent tokens.
    counts: Vec<(u32, u32)>,
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Self {
        let seed = params.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x5eed)
        });
        Self {
            params,
            rng: SplitMix64(seed),
            candidates: Vec::new(),
            counts: Vec::new(),
        }
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Picks the next token from `logits` (one per vocabulary entry), given
    /// the tokens so far. The penalties change `logits` in place.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        assert!(!logits.is_empty(), "sampling from an empty vocabulary");
        for &(id, bias) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        if self.params.has_penalties() {
            self.apply_penalties(logits, history);
        }
        if self.params.is_greedy() {
            return argmax(logits);
        }
        self.candidates.clear();
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (i as u32, l)),
        );
        if self.candidates.is_empty() {
            return 0;
        }
        self.top_k();
        let probs = self.top_p_min_p();
        self.draw(&probs)
    }

    fn apply_penalties(&mut self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        let recent = &history[history.len().saturating_sub(p.repeat_last_n)..];
        self.counts.clear();
        for &t in recent {
            match self.counts.iter_mut().find(|(id, _)| *id == t) {
                Some((_, c)) => *c += 1,
                None => self.counts.push((t, 1)),
            }
        }
        for &(t, count) in &self.counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l > 0.0 {
                *l /= p.repeat_penalty;
            } else {
                *l *= p.repeat_penalty;
            }
            *l -= count as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }

    /// Sorts the candidates by logit, highest first, keeping `top_k`.
    fn top_k(&mut self) {
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.params.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit);
            self.candidates.truncate(k);
        }
        self.candidates.sort_unstable_by(by_logit);
    }

    /// Applies top-p then min-p to the sorted candidates and returns the
    /// tempered probabilities of those kept.
    fn top_p_min_p(&mut self) -> Vec<f32> {
        let probs = softmax(self.candidates.iter().map(|c| c.1), 1.0);
        let mut keep = probs.len();
        if self.params.top_p < 1.0 {
            let mut cum = 0.0f32;
            for (i, p) in probs.iter().enumerate() {
                cum += p;
                if cum >= self.params.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.params.min_p > 0.0 {
            let floor = self.params.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        self.candidates.truncate(keep.max(1));
        softmax(self.candidates.iter().map(|c| c.1), self.params.temperature)
    }

    fn draw(&mut self, probs: &[f32]) -> u32 {
        let r = self.rng.next_f32();
        let mut cum = 0.0f32;
        for (c, p) in self.candidates.iter().zip(probs) {
            cum += p;
            if r < cum {
                return c.0;
            }
        }
        self.candidates.last().map_or(0, |c| c.0)
    }
}

/// A sampled token's log-probability and the most likely alternatives'.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// The `n` most likely tokens and their log-probabilities, most likely
    /// first (the lower id first on ties).
    pub top: Vec<(u32, f32)>,
}

/// The log-probability of `token` under `softmax(logits)`, and the `n_top`
/// most likely tokens': `l - max - ln Σ exp(l - max)`, the sum in f64 as
/// llama.cpp's perplexity takes it.
pub fn logprobs(logits: &[f32], token: u32, n_top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let log_z = sum.ln();
    let logprob = |l: f32| (f64::from(l - max) - log_z) as f32;
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    let by_logit = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    let n = n_top.min(order.len());
    if n > 0 && n < order.len() {
        order.select_nth_unstable_by(n - 1, by_logit);
    }
    order.truncate(n);
    order.sort_unstable_by(by_logit);
    TokenLogprob {
        token,
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&l| logprob(l)),
        top: order
            .into_iter()
            .map(|id| (id, logprob(logits[id as usize])))
            .collect(),
    }
}

/// Index of the largest value, the lowest index on ties; NaN never wins.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in values.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// `softmax(logits / temperature)`, computed stably.
fn softmax(logits: impl Iterator<Item = f32> + Clone, temperature: f32) -> Vec<f32> {
    let max = logits.clone().fold(f32::NEG_INFINITY, f32::max);
    let mut out: Vec<f32> = logits.map(|l| ((l - max) / temperature).exp()).collect();
    let sum: f32 = out.iter().sum();
    if sum > 0.0 && sum.is_finite() {
        out.iter_mut().for_each(|p| *p /= sum);
    }
    out
}

/// SplitMix64: small, fast, and the same stream on every platform and
/// release, which a seed promises.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplerParams {
        SamplerParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: Some(7),
            ..SamplerParams::default()
        }
    }

    /// Frequencies of each token over `n` draws.
    fn histogram(p: SamplerParams, logits: &[f32], n: usize) -> Vec<f32> {
        let mut s = Sampler::new(p);
        let mut h = vec![0f32; logits.len()];
        for _ in 0..n {
            let mut l = logits.to_vec();
            h[s.sample(&mut l, &[]) as usize] += 1.0;
        }
        h.iter().map(|c| c / n as f32).collect()
    }

    #[test]
    fn greedy_takes_the_first_largest() {
        let mut s = Sampler::new(SamplerParams::greedy());
        assert_eq!(s.sample(&mut [1.0, 3.0, 3.0, -1.0], &[]), 1);
        assert_eq!(s.sample(&mut [f32::NAN, -5.0, -4.0], &[]), 2);
    }

    #[test]
    fn temperature_one_follows_the_softmax() {
        let logits = [0.0f32, 1.0, 2.0];
        let e: Vec<f32> = logits.iter().map(|l| l.exp()).collect();
        let z: f32 = e.iter().sum();
        let h = histogram(params(1.0), &logits, 40_000);
        for (got, want) in h.iter().zip(e.iter().map(|x| x / z)) {
            assert!((got - want).abs() < 0.01, "{h:?}");
        }
    }

    #[test]
    fn top_k_one_is_greedy() {
        let p = SamplerParams {
            top_k: 1,
            ..params(5.0)
        };
        assert_eq!(histogram(p, &[0.5, 0.4, 0.6, 0.1], 500)[2], 1.0);
    }

    #[test]
    fn top_p_keeps_the_smallest_sufficient_set() {
        // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps two.
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let p = SamplerParams {
            top_p: 0.8,
            ..params(1.0)
        };
        let h = histogram(p, &logits, 20_000);
        assert_eq!(h[2] + h[3], 0.0, "{h:?}");
        assert!((h[0] - 0.64 / 0.88).abs() < 0.02, "{h:?}");
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let p = SamplerParams {
            min_p: 0.2,
            ..params(1.0)
        };
        // p1/p0 = e^-1 = 0.37 stays, p2/p0 = 0.14 goes.
        let h = histogram(p, &logits, 20_000);
        assert!(h[1] > 0.2 && h[2] == 0.0 && h[3] == 0.0, "{h:?}");
    }

    #[test]
    fn penalties_push_repeated_tokens_down() {
        let mut s = Sampler::new(SamplerParams {
            repeat_penalty: 2.0,
            ..SamplerParams::greedy()
        });
        let mut l = [2.0, 1.5, -1.0];
        assert_eq!(s.sample(&mut l, &[0, 2]), 1);
        assert_eq!(l, [1.0, 1.5, -2.0]);

        let mut s = Sampler::new(SamplerParams {
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            ..SamplerParams::greedy()
        });
        let mut l = [2.0, 1.5];
        s.sample(&mut l, &[0, 0, 1]);
        assert_eq!(l, [2.0 - 1.0 - 0.25, 1.5 - 0.5 - 0.25]);
    }

    #[test]
    fn penalties_only_look_back_repeat_last_n() {
        let mut s = Sampler::new(SamplerParams {
            repeat_penalty: 4.0,
            repeat_last_n: 1,
            ..SamplerParams::greedy()
        });
        assert_eq!(s.sample(&mut [2.0, 1.0], &[0, 1]), 0);
    }

    #[test]
    fn a_seed_fixes_the_stream() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerParams {
                seed: Some(seed),
                top_k: 0,
                ..SamplerParams::default()
            });
            (0..50)
                .map(|_| s.sample(&mut logits.clone(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn logit_bias_moves_and_bans_tokens() {
        let mut s = Sampler::new(SamplerParams {
            logit_bias: vec![(0, -100.0), (2, 1.5)],
            ..SamplerParams::greedy()
        });
        assert_eq!(s.sample(&mut [5.0, 1.0, 0.0], &[]), 2);
        let p = SamplerParams {
            logit_bias: vec![(1, f32::NAN)],
            ..SamplerParams::default()
        };
        assert!(p.validate().unwrap_err().contains("logit_bias"));
    }

    #[test]
    fn logprobs_are_the_log_softmax() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let want = |i: usize| (f64::from(logits[i]) - z.ln()) as f32;
        let lp = logprobs(&logits, 2, 3);
        assert!((lp.logprob - want(2)).abs() < 1e-6, "{lp:?}");
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!((lp.top[0].1 - want(1)).abs() < 1e-6);
        assert_eq!(logprobs(&logits, 0, 0).top, []);
        assert_eq!(logprobs(&logits, 0, 9).top.len(), 4);
    }

    #[test]
    fn validate_names_the_bad_setting() {
        let bad = SamplerParams {
            top_p: 1.5,
            ..SamplerParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("top_p"));
        assert!(SamplerParams::default().validate().is_ok());
    }
}
