//! Every `tokenizer.ggml.pre` name llama.cpp accepts, and what it sets:
//! the regex list, and the flags `llama_vocab::impl::load` changes from
//! byte-level BPE's defaults.

use super::regexes::*;

/// What a `tokenizer.ggml.pre` name sets.
#[derive(Clone, Copy, Debug)]
pub(in crate::tokenizer) struct PreSpec {
    pub exprs: &'static [&'static str],
    /// Drop the spaces before `?!.,` and some apostrophes when decoding.
    pub clean_spaces: bool,
    /// Take a pre-tokenized word that is itself a token whole, without merges.
    pub ignore_merges: bool,
    /// Add BOS by default (the GGUF's `add_bos_token` still decides).
    pub add_bos: bool,
    /// Words are spelled in GPT-2's byte→unicode map before merging; when
    /// false, merges run on raw UTF-8 and unknown bytes fall back to
    /// `<0xXX>` tokens.
    pub byte_encode: bool,
    /// Spaces become U+2581 before pre-tokenizing, and normal tokens show
    /// U+2581 as a space (SentencePiece-style BPE).
    pub escape_whitespaces: bool,
    /// BPE's default BOS (id 11) does not apply; only the GGUF's key sets one.
    pub no_default_bos: bool,
    /// A word of newlines only that is a token is taken whole (Gemma 4).
    pub newline_words_whole: bool,
}

/// Byte-level BPE's defaults for a regex list: clean-up on, the rest off.
const fn bpe(exprs: &'static [&'static str]) -> PreSpec {
    PreSpec {
        exprs,
        clean_spaces: true,
        ignore_merges: false,
        add_bos: false,
        byte_encode: true,
        escape_whitespaces: false,
        no_default_bos: false,
        newline_words_whole: false,
    }
}

impl PreSpec {
    const fn keep_spaces(mut self) -> Self {
        self.clean_spaces = false;
        self
    }

    const fn ignore_merges(mut self) -> Self {
        self.ignore_merges = true;
        self
    }

    const fn add_bos(mut self) -> Self {
        self.add_bos = true;
        self
    }

    const fn no_default_bos(mut self) -> Self {
        self.no_default_bos = true;
        self
    }

    /// SentencePiece-style BPE: escaped spaces, raw UTF-8 merges.
    const fn escaped_utf8(mut self) -> Self {
        self.byte_encode = false;
        self.escape_whitespaces = true;
        self
    }

    const fn utf8(mut self) -> Self {
        self.byte_encode = false;
        self
    }
}

/// Gemma 4's: SentencePiece-style BPE over lines.
const GEMMA4: PreSpec = {
    let mut spec = bpe(NEWLINE_RUNS_EXPRS).escaped_utf8();
    spec.newline_words_whole = true;
    spec
};

/// The names, grouped by what they set. Missing (empty) is llama.cpp's
/// "default".
const PRE_TOKENIZERS: &[(&[&str], PreSpec)] = &[
    (&["", "default"], bpe(DEFAULT_EXPRS)),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        bpe(LLAMA3_EXPRS).ignore_merges().add_bos(),
    ),
    (&["dbrx", "smaug-bpe"], bpe(LLAMA3_EXPRS)),
    (&["chatglm-bpe"], bpe(LLAMA3_EXPRS).no_default_bos()),
    (
        &["glm4", "glm5"],
        bpe(LLAMA3_EXPRS).no_default_bos().ignore_merges(),
    ),
    (&["jais-2"], bpe(JAIS2_EXPRS)),
    (&["deepseek-llm"], bpe(DEEPSEEK_LLM_EXPRS).keep_spaces()),
    (&["deepseek-coder"], bpe(DEEPSEEK_CODER_EXPRS).keep_spaces()),
    (
        &["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"],
        bpe(DEEPSEEK3_EXPRS).keep_spaces(),
    ),
    (&["spark2_5"], bpe(SPARK2_5_EXPRS).keep_spaces()),
    (&["youtu"], bpe(YOUTU_EXPRS).keep_spaces().ignore_merges()),
    (&["falcon"], bpe(FALCON_EXPRS)),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            // These three also ask for a separator token after a sequence
            // (embedding models); encoding itself is GPT-2's.
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
        ],
        bpe(GPT2_EXPRS),
    ),
    (
        &["trillion", "granite-docling"],
        bpe(GPT2_EXPRS).keep_spaces(),
    ),
    (
        &[
            "starcoder",
            "refact",
            "exaone",
            "minerva-7b",
            "mellum2",
            "codeshell",
        ],
        bpe(STARCODER_EXPRS),
    ),
    (&["smollm", "command-r"], bpe(STARCODER_EXPRS).keep_spaces()),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        bpe(QWEN2_EXPRS).keep_spaces(),
    ),
    (&["stablelm2", "megrez"], bpe(QWEN2_EXPRS)),
    (&["qwen35"], bpe(QWEN35_EXPRS).keep_spaces()),
    (&["ufakzeka"], bpe(UFAKZEKA_EXPRS).keep_spaces()),
    (
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        bpe(BAILINGMOE_EXPRS).keep_spaces(),
    ),
    (&["seed-coder"], bpe(SEED_CODER_EXPRS).keep_spaces()),
    (&["minicpm5"], bpe(MINICPM5_EXPRS).ignore_merges()),
    (&["exaone-moe"], bpe(EXAONE_MOE_EXPRS)),
    (&["laguna"], bpe(LAGUNA_EXPRS).keep_spaces()),
    (&["afmoe"], bpe(AFMOE_EXPRS).keep_spaces()),
    (&["kimi-k2"], bpe(KIMI_K2_EXPRS).keep_spaces()),
    (&["superbpe"], bpe(SUPERBPE_EXPRS).keep_spaces()),
    (&["bloom", "gpt3-finnish"], bpe(BLOOM_EXPRS)),
    (&["poro-chat"], bpe(BLOOM_EXPRS).keep_spaces()),
    (&["viking"], bpe(VIKING_EXPRS).keep_spaces()),
    (
        &["tekken"],
        bpe(TEKKEN_EXPRS).keep_spaces().ignore_merges().add_bos(),
    ),
    (&["chameleon"], bpe(CHAMELEON_EXPRS).keep_spaces().add_bos()),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        bpe(GPT4O_EXPRS).keep_spaces(),
    ),
    (
        &["granite-embed-multi-97m"],
        bpe(GRANITE_EMB_MULTI_EXPRS).keep_spaces().ignore_merges(),
    ),
    (
        &["tiny_aya", "cohere2moe"],
        bpe(TINY_AYA_EXPRS).keep_spaces(),
    ),
    (&["gemma4", "granite-embed-multi-311m"], GEMMA4),
    (
        &["sarvam-moe"],
        bpe(NEWLINE_RUNS_EXPRS).escaped_utf8().keep_spaces(),
    ),
    // jina-embeddings-v2-base-zh: whitespace-separated words, raw UTF-8.
    (&["whitespace"], bpe(WHITESPACE_EXPRS).utf8()),
];

/// What a pre-tokenizer name sets; `None` for names llama.cpp does not know.
pub(in crate::tokenizer) fn spec(name: &str) -> Option<PreSpec> {
    PRE_TOKENIZERS
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, spec)| spec)
}

/// Every name [`spec`] knows.
pub(super) fn all_names() -> impl Iterator<Item = &'static str> {
    PRE_TOKENIZERS
        .iter()
        .flat_map(|(names, _)| names.iter().copied())
        .filter(|n| !n.is_empty())
}

/// Every name [`spec`] knows, for error messages.
pub(in crate::tokenizer) fn known_names() -> String {
    all_names().collect::<Vec<_>>().join(", ")
}
