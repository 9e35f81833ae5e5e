//! The regex lists of llama.cpp's byte-level BPE pre-tokenizers, one per
//! `LLAMA_VOCAB_PRE_TYPE_*`, as its `llm_tokenizer_bpe` holds them.
//!
//! Where llama.cpp rewrote a tokenizer.json regex for its engine, this is
//! the rewritten form (what it runs): `(?i:'s|..)` spelled out as `'[sS]`,
//! possessive quantifiers made greedy, and, since llama.cpp reads every
//! letter subcategory (`\p{Lu}`, `\p{Ll}`..) as `\p{L}`, cased runs
//! approximated with ASCII (`(?=[\p{L}])([^a-z])`: a letter that is not
//! `a-z`). A few are markers for matchers written by hand
//! ([`KIMI_K2_MARKER`], [`AFMOE_DIGITS`], [`TINY_AYA_DIGITS`]).

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` with the case spelled out.
macro_rules! contractions {
    () => {
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    };
}

/// ASCII punctuation then ASCII letters, a letter run with an optional
/// lead, a punctuation/symbol run: DeepSeek V3's word rule, shared by
/// AFMoE.
macro_rules! punct_led_words {
    () => {
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##
    };
}

/// GPT-2's regex.
pub(super) const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex.
pub(super) const LLAMA3: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Llama 3's as written in tokenizer.json; llama.cpp matches it the same way.
pub(super) const LLAMA3_ORIGINAL: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's: Llama 3's with single digits.
pub(super) const QWEN2: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Qwen 3.5's: Qwen 2's with combining marks inside letter runs.
pub(super) const QWEN35: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Jais 2's: Llama 3's with whitespace runs cut into powers of two.
const JAIS2: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+",
    r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)",
    r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"
);
/// Qwen 2's without the English contractions, so that Turkish suffixes
/// after an apostrophe stay with their word (ufakzeka).
const UFAKZEKA: &str =
    r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Ling (bailingmoe): Qwen 2's with one line break per newline word.
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
/// Seed-Coder: line breaks never join a punctuation run.
const SEED_CODER: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// MiniCPM 5: whole number runs, after a first cut into threes.
const MINICPM5: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// EXAONE MoE: a letter run may hold single spaces between letters.
const EXAONE_MOE: &str = concat!(
    contractions!(),
    r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"
);

/// GPT-4o's (o200k): cased letter runs, approximated with ASCII case.
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Granite embedding (97m): GPT-4o's with combining marks as letters.
const GRANITE_EMB_MULTI: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*",
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Mistral's Tekken: GPT-4o's without contractions and with single digits.
const TEKKEN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+",
    r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Cohere's Tiny Aya: tokenizer.json's cased runs, which llama.cpp reads
/// as plain letter runs (every `\p{L*}` is `\p{L}` there).
const TINY_AYA_WORDS: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    contractions!(),
    r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Youtu: Tiny Aya's words with single digits.
const YOUTU_WORDS: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    contractions!(),
    r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    contractions!(),
    r"?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Hangul, CJK punctuation, Bopomofo and Han/kana runs (Youtu).
const YOUTU_CJK: &str = concat!(
    r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+",
    r"|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+",
    r"|[\x{3105}-\x{312F}]+",
    r"|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+"
);

/// DeepSeek V3's words.
const DEEPSEEK3_WORDS: &str = concat!(
    punct_led_words!(),
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
/// Spark 2.5's: DeepSeek V3's with each line break its own word.
const SPARK2_5_WORDS: &str = concat!(punct_led_words!(), r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+");
/// Han (U+4E00..U+9FA5) and kana runs.
const HAN_KANA: &str = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+";
/// CJK, kana, Thai, Lao, Khmer, Myanmar and Hangul runs (AFMoE). The third
/// range starts at U+8C48 as llama.cpp's source has it.
const AFMOE_SCRIPTS: &str = concat!(
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}",
    r"\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}",
    r"\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+"
);

/// Marker for Kimi K2's regex, matched by hand: Han runs, then Llama 3's
/// rule over letters other than Han.
pub(super) const KIMI_K2_MARKER: &str = r"\p{Han}+";
/// Marker for AFMoE's digit runs, matched by hand: cut into threes from
/// the right.
pub(super) const AFMOE_DIGITS: &str = r"\p{AFMoE_digits}";
/// Tiny Aya's digit grouping from tokenizer.json; llama.cpp cuts digit
/// runs into threes from the right instead of running it.
pub(super) const TINY_AYA_DIGITS: &str = r"\d{1,3}(?=(?:\d{3})*\b)";
/// Runs of non-newlines and runs of newlines (for SentencePiece-style BPE,
/// whose merges span spaces).
pub(super) const NEWLINE_RUNS: &str = r"[^\n]+|[\n]+";

/// Han, Samaritan to CJK, and Hangul runs (DeepSeek).
const DEEPSEEK_CJK: &str = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+";
/// DeepSeek LLM's cased letters (Lu, Ll, Lt of an older Unicode), as code
/// points: the published regex holds characters that Unicode normalisation
/// would silently change (U+2126 OHM SIGN, U+212A KELVIN SIGN, ...).
const DEEPSEEK_LETTERS: &str = concat!(
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}",
    r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}",
    r"\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}",
    r"\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}",
    r"\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}",
    r"\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}",
    r"\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}",
    r"\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}",
    r"\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}",
    r"\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}",
    r"\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}",
    r"\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}",
    r"\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}",
    r"\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}",
    r"\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}",
    r"\x{1E900}-\x{1E943}]+",
);
/// ASCII and full-width punctuation, curly quotes, 、。 (DeepSeek LLM).
const DEEPSEEK_PUNCT: &str =
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+";
/// BLOOM's: runs up to whitespace or sentence punctuation, with one
/// leading space. The parentheses and `|` are members of the class.
const BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

// The lists, named after llama.cpp's LLAMA_VOCAB_PRE_TYPE_*.
pub(super) const DEFAULT_EXPRS: &[&str] =
    &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
pub(super) const GPT2_EXPRS: &[&str] = &[GPT2];
pub(super) const LLAMA3_EXPRS: &[&str] = &[LLAMA3];
pub(super) const QWEN2_EXPRS: &[&str] = &[QWEN2];
pub(super) const QWEN35_EXPRS: &[&str] = &[QWEN35];
pub(super) const JAIS2_EXPRS: &[&str] = &[JAIS2];
pub(super) const STARCODER_EXPRS: &[&str] = &[r"\p{N}", GPT2];
pub(super) const FALCON_EXPRS: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"];
pub(super) const DEEPSEEK_LLM_EXPRS: &[&str] = &[
    "[\r\n]",
    DEEPSEEK_LETTERS,
    DEEPSEEK_PUNCT,
    r"\s+$",
    DEEPSEEK_CJK,
    r"\p{N}+",
];
pub(super) const DEEPSEEK_CODER_EXPRS: &[&str] =
    &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"];
pub(super) const DEEPSEEK3_EXPRS: &[&str] = &[r"\p{N}{1,3}", HAN_KANA, DEEPSEEK3_WORDS];
pub(super) const SPARK2_5_EXPRS: &[&str] = &[r"\p{N}{1,3}", HAN_KANA, SPARK2_5_WORDS, r"\p{N}"];
pub(super) const YOUTU_EXPRS: &[&str] = &[YOUTU_CJK, YOUTU_WORDS];
pub(super) const BLOOM_EXPRS: &[&str] = &[BLOOM];
pub(super) const VIKING_EXPRS: &[&str] = &[BLOOM, r"\p{N}"];
pub(super) const TEKKEN_EXPRS: &[&str] = &[TEKKEN];
pub(super) const CHAMELEON_EXPRS: &[&str] = &[
    // Sentinel and image tokens, which special-token cutting finds first
    // anyway; kept because the upstream pre-tokenizer has them.
    r"<sentinel:[0-9]+>",
    r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    r"([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    GPT2,
];
pub(super) const GPT4O_EXPRS: &[&str] = &[GPT4O];
pub(super) const GRANITE_EMB_MULTI_EXPRS: &[&str] = &[GRANITE_EMB_MULTI];
pub(super) const TINY_AYA_EXPRS: &[&str] = &[TINY_AYA_DIGITS, TINY_AYA_WORDS];
pub(super) const KIMI_K2_EXPRS: &[&str] = &[KIMI_K2_MARKER];
pub(super) const SUPERBPE_EXPRS: &[&str] = &[r"\p{N}+", r"(?=(\d{3})+(?!\d))"];
pub(super) const BAILINGMOE_EXPRS: &[&str] = &[BAILINGMOE];
pub(super) const SEED_CODER_EXPRS: &[&str] = &[SEED_CODER];
pub(super) const UFAKZEKA_EXPRS: &[&str] = &[UFAKZEKA];
pub(super) const AFMOE_EXPRS: &[&str] = &[AFMOE_DIGITS, AFMOE_SCRIPTS, DEEPSEEK3_WORDS];
pub(super) const LAGUNA_EXPRS: &[&str] = &[NEWLINE_RUNS, QWEN2];
pub(super) const EXAONE_MOE_EXPRS: &[&str] = &[EXAONE_MOE];
pub(super) const NEWLINE_RUNS_EXPRS: &[&str] = &[NEWLINE_RUNS];
pub(super) const MINICPM5_EXPRS: &[&str] = &[r"\p{N}{1,3}", MINICPM5];
pub(super) const WHITESPACE_EXPRS: &[&str] = &[r"\S+"];
