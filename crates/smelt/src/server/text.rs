//! Streamed text held back while it might turn out to be the start of a
//! stop string. (Whole UTF-8 characters only: `tokenizer::Utf8Stream`.)

pub use crate::tokenizer::Utf8Stream;

/// Watches streamed text for stop strings, as OpenAI's `stop` works: the
/// text up to the first stop string is returned, the stop string and all
/// after it are not. Text that could still grow into a stop string is held
/// back until it cannot.
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum StopScan {
    /// Text that is safe to send; generation goes on.
    Continue(String),
    /// Text before the stop string; generation ends.
    Stopped(String),
}

impl StopMatcher {
    /// Empty stop strings are ignored: they would stop before any text.
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> StopScan {
        self.held.push_str(text);
        // The earliest stop string wins, wherever it starts.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let out = self.held[..at].to_string();
            self.held.clear();
            return StopScan::Stopped(out);
        }
        let keep = self.partial_suffix_len();
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopScan::Continue(out)
    }

    /// The held-back text, when generation ends for another reason.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that are a proper prefix of a stop string.
    fn partial_suffix_len(&self) -> usize {
        let mut best = 0;
        for stop in &self.stops {
            let max = (stop.len() - 1).min(self.held.len());
            for n in (best + 1..=max).rev() {
                let start = self.held.len() - n;
                if self.held.is_char_boundary(start) && stop.starts_with(&self.held[start..]) {
                    best = n;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_held_back_and_cut() {
        let mut m = StopMatcher::new(&["\nUser:".into(), "END".into()]);
        assert_eq!(m.push("Hello"), StopScan::Continue("Hello".into()));
        assert_eq!(m.push(" there\nUs"), StopScan::Continue(" there".into()));
        // The held "\nUs" was not a stop after all.
        assert_eq!(m.push("ually"), StopScan::Continue("\nUsually".into()));
        assert_eq!(m.push(" EN"), StopScan::Continue(" ".into()));
        assert_eq!(m.push("D and more"), StopScan::Stopped(String::new()));
        let mut m = StopMatcher::new(&["b".into(), "abc".into()]);
        assert_eq!(m.push("xab"), StopScan::Stopped("xa".into()));
        let mut m = StopMatcher::new(&["日本".into()]);
        assert_eq!(m.push("x日"), StopScan::Continue("x".into()));
        assert_eq!(m.flush(), "日");
    }
}
