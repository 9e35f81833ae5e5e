use std::collections::BTreeMap;

use serde_json::Value;

use super::matchers::{split_digit_groups, split_gpt2, split_llama3, split_qwen2, split_qwen35};
use super::names::all_names;
use super::regexes::{GPT2, GPT2_EXPRS, LLAMA3, QWEN2, QWEN35};
use super::*;

fn words<'a>(pre: &PreTokenizer, text: &'a str) -> Vec<&'a str> {
    pre.split(text).into_iter().map(|r| &text[r]).collect()
}

/// llama.cpp's names, flags and splits, made from its source with Python's
/// `regex` module by `scripts/pretokenizer_splits.py`.
fn reference() -> Value {
    let json = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/tokenizer/pre-splits.json"
    ));
    serde_json::from_str(json).expect("pre-splits.json parses")
}

/// Every name llama.cpp accepts is known here with the flags llama.cpp
/// sets, and no other name is.
#[test]
fn names_and_flags_are_llama_cpps() {
    let reference = reference();
    let names = reference["names"].as_object().unwrap();
    assert!(names.len() >= 91, "only {} names", names.len());
    let mut failures = Vec::new();
    for (name, want) in names {
        let Some(got) = spec(name) else {
            failures.push(format!("{name}: unknown"));
            continue;
        };
        let got_flags = [
            ("clean_spaces", got.clean_spaces),
            ("ignore_merges", got.ignore_merges),
            ("add_bos", got.add_bos),
            ("byte_encode", got.byte_encode),
            ("escape_whitespaces", got.escape_whitespaces),
            ("no_default_bos", got.no_default_bos),
        ];
        for (flag, value) in got_flags {
            if want[flag].as_bool() != Some(value) {
                failures.push(format!(
                    "{name}: {flag} is {value}, llama.cpp {}",
                    want[flag]
                ));
            }
        }
    }
    for name in all_names() {
        if !names.contains_key(name) {
            failures.push(format!("{name}: not a llama.cpp name"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(spec("no-such-pre").is_none());
}

/// Every name's regex list cuts the vocabulary vectors' texts (and a few
/// more) into the words Python's `regex` module cut them into.
#[test]
fn splits_match_an_independent_regex_engine() {
    let reference = reference();
    let texts: Vec<&str> = reference["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(texts.len() > 60);
    // One pre-tokenizer per llama.cpp type; its names share the splits.
    let mut by_type: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, flags) in reference["names"].as_object().unwrap() {
        by_type
            .entry(flags["type"].as_str().unwrap())
            .or_default()
            .push(name);
    }
    let mut failures = Vec::new();
    for (pre_type, names) in &by_type {
        let want = &reference["splits"][pre_type];
        for name in names {
            let pre = PreTokenizer::new(spec(name).unwrap().exprs).unwrap();
            for (i, text) in texts.iter().enumerate() {
                let got: Vec<usize> = pre
                    .split(text)
                    .into_iter()
                    .map(|r| text[r].chars().count())
                    .collect();
                let want: Vec<usize> = want[i]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_u64().unwrap() as usize)
                    .collect();
                if got != want {
                    let cut = |lens: &[usize]| {
                        let mut chars = text.chars();
                        lens.iter()
                            .map(|&n| chars.by_ref().take(n).collect::<String>())
                            .collect::<Vec<_>>()
                    };
                    failures.push(format!(
                        "{name} ({pre_type}) on {text:?}:\n  want {:?}\n   got {:?}",
                        cut(&want),
                        cut(&got)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The regex engine would read `\w`, `\b`, `\s` and the like with Unicode
/// classes where llama.cpp's reads ASCII ones; only `\d` (rewritten) and
/// `\s` (non-ASCII whitespace is U+000B in both views) may appear.
#[test]
fn engine_regexes_use_no_unicode_aware_classes() {
    for name in all_names() {
        for expr in spec(name).unwrap().exprs {
            if by_hand(expr).is_some() {
                continue;
            }
            for class in [r"\w", r"\W", r"\b", r"\B", r"\D"] {
                assert!(!expr.contains(class), "{name}: {expr} uses {class}");
            }
        }
    }
}

#[test]
fn engine_patterns() {
    assert_eq!(engine_pattern(r"\p{N}+", true), r"[\x{D1}0-9]+");
    assert_eq!(
        engine_pattern(r"[^\s\p{L}\p{N}]", true),
        r"[^\s\x{D2}A-Za-z\x{D1}0-9]"
    );
    assert_eq!(
        engine_pattern(r"(?=(\d{3})+(?!\d))", false),
        r"(?=([0-9]{3})+(?![0-9]))"
    );
    // An escaped bracket opens no class.
    assert_eq!(
        engine_pattern(r"\[\p{S}", true),
        r"\[[\x{D5}\$\+<->\^`\|\x7E]"
    );
    assert_eq!(engine_pattern(r"[\d\p{M}]", true), r"[0-9\x{D4}]");
}

/// The hand-written matchers against the regex engine on the collapsed
/// text, over random strings of awkward characters: llama.cpp takes
/// them to be the same split.
#[test]
fn hand_written_splits_match_the_regexes() {
    use rand::{Rng, SeedableRng};
    let pool: Vec<char> =
        "aZé ß 7٣½'sStTrReEvVmMlLdD\n\r\t \u{A0}\u{3000}\u{85}.,!?-_~$+<>|`\"()[]{}@#\
        \u{301}\u{308}\u{93F}\u{200D}\u{FE0F}🦙😶🌫中文한국어ـ\u{0378}\u{E000}"
            .chars()
            .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (expr, split) in [
        (GPT2, split_gpt2 as Splitter),
        (LLAMA3, split_llama3),
        (QWEN2, split_qwen2),
        (QWEN35, split_qwen35),
        // What llama.cpp's digit matcher does, as a regex: a run's first
        // group takes what precedes it.
        (
            r"[^\p{N}]*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))",
            split_digit_groups,
        ),
    ] {
        let re = Regex::new(&engine_pattern(expr, true)).unwrap();
        for _ in 0..3000 {
            let len = rng.gen_range(1..24);
            let cpts: Vec<char> = (0..len)
                .map(|_| pool[rng.gen_range(0..pool.len())])
                .collect();
            let lens = [cpts.len()];
            let by_hand = split(&cpts, &lens);
            let by_regex = View::collapsed(&cpts).split(&re, &lens);
            let text: String = cpts.iter().collect();
            assert_eq!(by_hand, by_regex, "{expr}: {text:?}");
        }
    }
}

#[test]
fn gpt2_keeps_one_space_for_the_next_word() {
    let pre = PreTokenizer::new(GPT2_EXPRS).unwrap();
    assert_eq!(words(&pre, "a   b  "), ["a", "  ", " b", "  "]);
    assert_eq!(words(&pre, "it's 42!"), ["it", "'s", " 42", "!"]);
}
