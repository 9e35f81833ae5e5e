//! The example data sets: scikit-learn's 8×8 handwritten digits (shipped
//! in `testdata/nn`, from the scikit-learn wheel) and a text corpus read
//! as bytes (by default Debian's license texts in
//! `/usr/share/common-licenses`).

use std::io::Read;
use std::path::Path;

use crate::error::{NnError, Result};
use crate::vars::Rng;

/// scikit-learn 1.9.1's `sklearn/datasets/data/digits.csv.gz`: 1797 rows of
/// 64 pixels (0..16) and the label (UCI's optical digits test set).
const DIGITS_GZ: &[u8] = include_bytes!("../../../testdata/nn/digits.csv.gz");

/// Images `[n, 1, 8, 8]` scaled to 0..1, and labels.
#[derive(Clone, Debug, Default)]
pub struct Digits {
    pub images: Vec<f32>,
    pub labels: Vec<f32>,
}

pub const DIGIT_PIXELS: usize = 64;

impl Digits {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Every digit, in file order.
    pub fn load() -> Result<Digits> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(DIGITS_GZ).read_to_string(&mut text)?;
        Self::parse(&text)
    }

    /// Rows of 64 pixel values and a label, comma-separated.
    pub fn parse(text: &str) -> Result<Digits> {
        let mut d = Digits::default();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let vals: Vec<f32> = line
                .split(',')
                .map(|v| v.trim().parse::<f32>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| bad(i, &e.to_string()))?;
            if vals.len() != DIGIT_PIXELS + 1 {
                return Err(bad(i, &format!("{} values, want 65", vals.len())));
            }
            let label = vals[DIGIT_PIXELS];
            if !(0.0..10.0).contains(&label) || label.fract() != 0.0 {
                return Err(bad(i, &format!("label {label}")));
            }
            d.images
                .extend(vals[..DIGIT_PIXELS].iter().map(|p| p / 16.0));
            d.labels.push(label);
        }
        Ok(d)
    }

    /// A shuffled split: `held_out` of the digits for evaluation, the rest
    /// for training.
    pub fn split(&self, held_out: f32, seed: u64) -> (Digits, Digits) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        Rng::new(seed).shuffle(&mut order);
        let n_test = (self.len() as f32 * held_out).round() as usize;
        let pick = |idx: &[usize]| Digits {
            images: idx
                .iter()
                .flat_map(|&i| {
                    self.images[i * DIGIT_PIXELS..][..DIGIT_PIXELS]
                        .iter()
                        .copied()
                })
                .collect(),
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
        };
        (pick(&order[n_test..]), pick(&order[..n_test]))
    }

    /// Images and labels of the digits `idx`.
    pub fn batch(&self, idx: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let images = idx
            .iter()
            .flat_map(|&i| {
                self.images[i * DIGIT_PIXELS..][..DIGIT_PIXELS]
                    .iter()
                    .copied()
            })
            .collect();
        (images, idx.iter().map(|&i| self.labels[i]).collect())
    }
}

fn bad(line: usize, msg: &str) -> NnError {
    NnError::File {
        path: "digits.csv".into(),
        msg: format!("line {}: {msg}", line + 1),
    }
}

/// A text corpus as bytes, its vocabulary (the bytes that occur) and a
/// split: the last tenth held out.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub vocab: Vec<u8>,
    /// Token ids of the training part and of the held-out part.
    pub train: Vec<u32>,
    pub held_out: Vec<u32>,
}

pub const DEFAULT_CORPUS: &str = "/usr/share/common-licenses";

impl Corpus {
    /// A file, or every file of a directory (sorted by name, each once:
    /// Debian links some licenses to others).
    pub fn load(path: &Path) -> Result<Corpus> {
        let err = |msg: String| NnError::File {
            path: path.display().to_string(),
            msg,
        };
        let mut text = Vec::new();
        if path.is_dir() {
            let mut files: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| err(e.to_string()))?
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .collect();
            files.sort();
            for f in files {
                text.extend(std::fs::read(&f).map_err(|e| err(e.to_string()))?);
                text.push(b'\n');
            }
        } else {
            text = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        }
        if text.len() < 1000 {
            return Err(err(format!(
                "{} bytes is too little text to train on",
                text.len()
            )));
        }
        Ok(Self::from_bytes(&text))
    }

    pub fn from_bytes(text: &[u8]) -> Corpus {
        let mut seen = [false; 256];
        for &b in text {
            seen[b as usize] = true;
        }
        let vocab: Vec<u8> = (0..=255u8).filter(|&b| seen[b as usize]).collect();
        let mut id = [0u32; 256];
        for (i, &b) in vocab.iter().enumerate() {
            id[b as usize] = i as u32;
        }
        let ids: Vec<u32> = text.iter().map(|&b| id[b as usize]).collect();
        let split = ids.len() - ids.len() / 10;
        Corpus {
            vocab,
            train: ids[..split].to_vec(),
            held_out: ids[split..].to_vec(),
        }
    }

    /// The cross-entropy (nats per byte) of the held-out part under the
    /// training part's byte frequencies (add-one smoothed): the unigram
    /// baseline.
    pub fn unigram_baseline(&self) -> f64 {
        let v = self.vocab.len();
        let mut counts = vec![1.0f64; v];
        for &t in &self.train {
            counts[t as usize] += 1.0;
        }
        let total: f64 = counts.iter().sum();
        let nll: f64 = self
            .held_out
            .iter()
            .map(|&t| -(counts[t as usize] / total).ln())
            .sum();
        nll / self.held_out.len() as f64
    }
}
