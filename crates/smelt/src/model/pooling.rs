//! Embeddings: a sequence's final hidden states (after the output norm,
//! llama.cpp's `embd`) pooled into one vector, then L2-normalized.
//!
//! ```text
//! mean:  e = Σ_t h[t] / T
//! cls:   e = h[0]
//! last:  e = h[T-1]
//! none:  one vector per token, e[t] = h[t]
//! then:  e / ‖e‖₂          (llama.cpp's `--embd-normalize 2`, OpenAI's)
//! ```
//!
//! Legend: `T` tokens of the sequence, `E` `n_embd`.

use std::fmt;
use std::str::FromStr;

/// How a sequence's hidden states become its embedding, with llama.cpp's
/// names and `{arch}.pooling_type` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// One vector per token.
    None,
    Mean,
    /// The first token's (BERT's `[CLS]`).
    Cls,
    /// The last token's: what a causal model has read the whole input by.
    Last,
}

impl Pooling {
    /// `{arch}.pooling_type`'s value (llama.cpp's `llama_pooling_type`);
    /// `None` for rank (a reranker's head) and unknown values.
    pub fn from_gguf(value: u32) -> Option<Pooling> {
        match value {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }

    /// Pools `hidden` (`T × E`, row-major) into `E` values (`T × E` for
    /// `None`), each vector L2-normalized. `T` must be at least 1.
    pub fn pool(self, hidden: &[f32], n_embd: usize) -> Vec<f32> {
        let rows = hidden.chunks_exact(n_embd);
        let mut out = match self {
            Pooling::None => hidden.to_vec(),
            Pooling::Cls => rows.take(1).flatten().copied().collect(),
            Pooling::Last => rows.last().unwrap_or(&[]).to_vec(),
            Pooling::Mean => {
                let n = (hidden.len() / n_embd) as f64;
                let mut sum = vec![0f64; n_embd];
                for row in rows {
                    for (s, &v) in sum.iter_mut().zip(row) {
                        *s += v as f64;
                    }
                }
                sum.iter().map(|&s| (s / n) as f32).collect()
            }
        };
        for v in out.chunks_exact_mut(n_embd) {
            normalize(v);
        }
        out
    }
}

/// `v / ‖v‖₂`, summed in f64 as llama.cpp's `common_embd_normalize`; a
/// zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { (1.0 / norm) as f32 } else { 0.0 };
    for x in v {
        *x *= scale;
    }
}

impl FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Pooling::None),
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            _ => Err(format!("unknown pooling {s:?} (none, mean, cls or last)")),
        }
    }
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_and_normalizes() {
        // Two tokens of E = 2.
        let h = [3.0, 4.0, 0.0, 2.0];
        assert_eq!(Pooling::Cls.pool(&h, 2), vec![0.6, 0.8]);
        assert_eq!(Pooling::Last.pool(&h, 2), vec![0.0, 1.0]);
        // mean (1.5, 3) has norm 3.354...
        let m = Pooling::Mean.pool(&h, 2);
        assert!((m[0] - 1.5 / 45f32.sqrt() * 2.0).abs() < 1e-6, "{m:?}");
        assert!((m[1] - 3.0 / 45f32.sqrt() * 2.0).abs() < 1e-6, "{m:?}");
        assert_eq!(Pooling::None.pool(&h, 2), vec![0.6, 0.8, 0.0, 1.0]);
        assert_eq!(Pooling::Last.pool(&[0.0, 0.0], 2), vec![0.0, 0.0]);
    }

    #[test]
    fn names_round_trip() {
        for p in [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last] {
            assert_eq!(p.to_string().parse::<Pooling>(), Ok(p));
        }
        assert!("rank".parse::<Pooling>().is_err());
        assert_eq!(Pooling::from_gguf(3), Some(Pooling::Last));
        assert_eq!(Pooling::from_gguf(4), None);
    }
}
