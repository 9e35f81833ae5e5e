//! Built-in chat templates for models whose GGUF carries no
//! `tokenizer.chat_template`, chosen by name (`--chat-template NAME`) or by
//! the model's architecture and vocabulary ([`for_model`]).
//!
//! Each is the format its model card documents, written as a Jinja
//! template so it renders through the same engine as a GGUF's own. Where
//! llama.cpp has a built-in of the same name (`llama_chat_apply_template`),
//! ours renders the same text for system/user/assistant conversations;
//! `qwen3` and `gpt-oss` render what the models' own templates render for
//! conversations without tools.

/// `<|im_start|>role\ncontent<|im_end|>\n`: OpenAI's ChatML, used by Qwen,
/// SmolLM, Hermes and many fine-tunes. llama.cpp's fallback when a model has
/// no template.
const CHATML: &str = "\
{%- for message in messages -%}
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_start|>assistant\\n' }}
{%- endif -%}
";

/// Qwen 3 (and Qwen 3 MoE): ChatML, with an assistant turn's reasoning
/// (`reasoning_content`, or a `<think>` block leading its content) kept only
/// after the last user message, in a `<think>` block that the final
/// assistant turn always has.
const QWEN3: &str = "\
{%- set ns = namespace(last_query=messages|length - 1) -%}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}
{%- set ns.last_query = loop.index0 -%}
{%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
{%- if message['role'] == 'assistant' -%}
{%- set content = message['content'] -%}
{%- if message['reasoning_content'] is defined and message['reasoning_content'] is not none -%}
{%- set reasoning = message['reasoning_content'] -%}
{%- elif '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}
{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
{%- else -%}
{%- set reasoning = '' -%}
{%- endif -%}
{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
{{ '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') + '<|im_end|>\\n' }}
{%- else -%}
{{ '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
{%- endif -%}
{%- else -%}
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_start|>assistant\\n' }}
{%- endif -%}
";

/// Meta Llama 3 Instruct: BOS once, then a header per turn; contents are
/// trimmed, as Meta's own template does.
const LLAMA3: &str = "\
{{- bos_token -}}
{%- for message in messages -%}
{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif -%}
";

/// Gemma (1, 2 and 3): `user` and `model` turns that must alternate. Gemma
/// has no system role; like Gemma 3's template, a leading system message is
/// prepended to the first user turn.
const GEMMA: &str = "\
{{- bos_token -}}
{%- if messages and messages[0]['role'] == 'system' -%}
{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
{%- set loop_messages = messages[1:] -%}
{%- else -%}
{%- set first_user_prefix = '' -%}
{%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{%- endif -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<start_of_turn>model\\n' }}
{%- endif -%}
";

/// Phi-3 and Phi-3.5: `<|role|>\ncontent<|end|>\n`; an empty system
/// message and other roles are left out, and a prompt without a generation
/// prompt ends in EOS, as Phi-3.5's template does.
const PHI3: &str = "\
{%- for message in messages -%}
{%- if message['role'] == 'system' and message['content'] or message['role'] in ['user', 'assistant'] -%}
{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|assistant|>\\n' }}
{%- else -%}
{{ eos_token }}
{%- endif -%}
";

/// Phi-4: ChatML with `<|im_sep|>` after the role and no newlines.
const PHI4: &str = "\
{%- for message in messages -%}
{{ '<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + '<|im_end|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_start|>assistant<|im_sep|>' }}
{%- endif -%}
";

/// Mistral's `[INST]` formats before v7 (mistral-v1, v3, v3-tekken): a turn
/// opens with `[INST]`, holds any system message (then a blank line) and
/// the user message, and closes with `[/INST]`; the answer follows, ended
/// by EOS. `$open` and `$close` carry the version's spaces; `$answer` is
/// the Jinja expression for an answer. No generation prompt: the prompt
/// ends in `[/INST]`.
macro_rules! mistral_inst {
    ($open:literal, $close:literal, $answer:literal) => {
        concat!(
            "{{- bos_token -}}\n",
            "{%- set turn = namespace(open=false) -%}\n",
            "{%- for message in messages -%}\n",
            "{%- if not turn.open -%}\n",
            "{{ '",
            $open,
            "' }}\n",
            "{%- set turn.open = true -%}\n",
            "{%- endif -%}\n",
            "{%- if message['role'] == 'system' -%}\n",
            "{{ message['content'] + '\\n\\n' }}\n",
            "{%- elif message['role'] == 'user' -%}\n",
            "{{ message['content'] + '",
            $close,
            "' }}\n",
            "{%- else -%}\n",
            "{{ ",
            $answer,
            " + eos_token }}\n",
            "{%- set turn.open = false -%}\n",
            "{%- endif -%}\n",
            "{%- endfor -%}\n",
        )
    };
}

/// Mistral 7B Instruct v0.1/v0.2 (SentencePiece, no control tokens).
const MISTRAL_V1: &str = mistral_inst!(" [INST] ", " [/INST]", "' ' + message['content']");
/// Mistral v0.3, Mixtral 8x22B, Codestral: answers trimmed.
const MISTRAL_V3: &str = mistral_inst!("[INST] ", "[/INST]", "' ' + message['content'] | trim");
/// Mistral NeMo (Tekken vocabulary): no spaces around the markers.
const MISTRAL_V3_TEKKEN: &str = mistral_inst!("[INST]", "[/INST]", "message['content']");

/// Mistral's v7 formats: system messages in `[SYSTEM_PROMPT]`; `$space`
/// after each opening marker and before answers.
macro_rules! mistral_v7 {
    ($space:literal) => {
        concat!(
            "{{- bos_token -}}\n",
            "{%- for message in messages -%}\n",
            "{%- if message['role'] == 'system' -%}\n",
            "{{ '[SYSTEM_PROMPT]",
            $space,
            "' + message['content'] + '[/SYSTEM_PROMPT]' }}\n",
            "{%- elif message['role'] == 'user' -%}\n",
            "{{ '[INST]",
            $space,
            "' + message['content'] + '[/INST]' }}\n",
            "{%- else -%}\n",
            "{{ '",
            $space,
            "' + message['content'] + eos_token }}\n",
            "{%- endif -%}\n",
            "{%- endfor -%}\n",
        )
    };
}

/// Mistral Large 2411 (SentencePiece).
const MISTRAL_V7: &str = mistral_v7!(" ");
/// Mistral Small 3 and later (Tekken).
const MISTRAL_V7_TEKKEN: &str = mistral_v7!("");

/// gpt-oss's Harmony format without tools: a system message with the date
/// and reasoning effort, a leading system/developer message as developer
/// instructions, then `<|start|>role<|message|>content<|end|>`, answers on
/// the `final` channel. A conversation that ends with an answer (no
/// generation prompt) ends it with `<|return|>`, after its `thinking` on
/// the `analysis` channel, as in training.
const GPT_OSS: &str = "\
{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n' -}}
{{- 'Knowledge cutoff: 2024-06\\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\\n\\n' -}}
{{- 'Reasoning: ' + (reasoning_effort if reasoning_effort is defined else 'medium') + '\\n\\n' -}}
{{- '# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>' -}}
{%- set has_instructions = messages and messages[0]['role'] in ['system', 'developer'] -%}
{%- if has_instructions and messages[0]['content'] -%}
{{ '<|start|>developer<|message|># Instructions\\n\\n' + messages[0]['content'] + '\\n\\n<|end|>' }}
{%- endif -%}
{%- for message in (messages[1:] if has_instructions else messages) -%}
{%- if message['role'] == 'user' -%}
{{ '<|start|>user<|message|>' + message['content'] + '<|end|>' }}
{%- elif message['role'] == 'assistant' and loop.last and not add_generation_prompt -%}
{%- if message['thinking'] is defined -%}
{{ '<|start|>assistant<|channel|>analysis<|message|>' + message['thinking'] + '<|end|>' }}
{%- endif -%}
{{ '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|return|>' }}
{%- elif message['role'] == 'assistant' -%}
{{ '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|start|>assistant' }}
{%- endif -%}
";

/// Every built-in template, by name (llama.cpp's names where it has one).
pub const BUILTINS: &[(&str, &str)] = &[
    ("chatml", CHATML),
    ("llama3", LLAMA3),
    ("gemma", GEMMA),
    ("qwen3", QWEN3),
    ("phi3", PHI3),
    ("phi4", PHI4),
    ("mistral-v1", MISTRAL_V1),
    ("mistral-v3", MISTRAL_V3),
    ("mistral-v3-tekken", MISTRAL_V3_TEKKEN),
    ("mistral-v7", MISTRAL_V7),
    ("mistral-v7-tekken", MISTRAL_V7_TEKKEN),
    ("gpt-oss", GPT_OSS),
];

/// The source of the built-in template `name`.
pub fn source(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The names of the built-in templates, for error messages and `--help`.
pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}

/// What [`for_model`] looks at in a GGUF without a chat template.
pub struct ModelHints<'a> {
    /// `general.architecture`.
    pub architecture: &'a str,
    /// `tokenizer.ggml.tokens`, empty if absent.
    pub tokens: &'a [String],
    /// `tokenizer.ggml.pre`, empty if absent.
    pub pre: &'a str,
    /// `general.name`, empty if absent.
    pub name: &'a str,
}

impl ModelHints<'_> {
    fn has_token(&self, text: &str) -> bool {
        self.tokens.iter().any(|t| t == text)
    }
}

/// The built-in template for a model without its own: by architecture, and
/// within one by the control tokens its vocabulary has. Models that none of
/// these fit get ChatML, llama.cpp's fallback.
pub fn for_model(model: &ModelHints) -> &'static str {
    match model.architecture {
        a if a.starts_with("gemma") => "gemma",
        "qwen3" | "qwen3moe" => "qwen3",
        "phi3" if model.has_token("<|im_sep|>") => "phi4",
        "phi3" => "phi3",
        "gpt-oss" => "gpt-oss",
        "llama" => llama_family(model),
        _ => "chatml",
    }
}

/// Under `llama`: Llama 3 by its header tokens; Mistral by its control
/// tokens (v7 has `[SYSTEM_PROMPT]`, v3 `[INST]`; Tekken vocabularies by
/// their pre-tokenizer), or by name for v0.1/v0.2, whose vocabulary is
/// Llama 2's; else ChatML (Llama 2 style models, as in llama.cpp).
fn llama_family(model: &ModelHints) -> &'static str {
    let tekken = model.pre == "tekken";
    if model.has_token("<|start_header_id|>") {
        "llama3"
    } else if model.has_token("[SYSTEM_PROMPT]") {
        if tekken {
            "mistral-v7-tekken"
        } else {
            "mistral-v7"
        }
    } else if model.has_token("[INST]") {
        if tekken {
            "mistral-v3-tekken"
        } else {
            "mistral-v3"
        }
    } else if model.name.to_ascii_lowercase().contains("mistral") {
        "mistral-v1"
    } else {
        "chatml"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(architecture: &str, tokens: &[&str], pre: &str, name: &str) -> &'static str {
        let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        for_model(&ModelHints {
            architecture,
            tokens: &tokens,
            pre,
            name,
        })
    }

    #[test]
    fn chosen_by_architecture_and_vocabulary() {
        assert_eq!(pick("qwen2", &["<|im_start|>"], "qwen2", ""), "chatml");
        assert_eq!(pick("qwen3", &[], "qwen2", ""), "qwen3");
        assert_eq!(pick("qwen3moe", &[], "qwen2", ""), "qwen3");
        assert_eq!(pick("gemma2", &[], "", ""), "gemma");
        assert_eq!(pick("gemma3", &[], "", ""), "gemma");
        assert_eq!(pick("phi3", &["<|end|>"], "", ""), "phi3");
        assert_eq!(pick("phi3", &["<|im_sep|>"], "gpt-4o", "Phi 4"), "phi4");
        assert_eq!(pick("gpt-oss", &[], "gpt-4o", ""), "gpt-oss");
        assert_eq!(
            pick("llama", &["<|start_header_id|>"], "llama-bpe", ""),
            "llama3"
        );
        assert_eq!(
            pick("llama", &["[INST]", "[SYSTEM_PROMPT]"], "tekken", ""),
            "mistral-v7-tekken"
        );
        assert_eq!(
            pick("llama", &["[INST]", "[SYSTEM_PROMPT]"], "", ""),
            "mistral-v7"
        );
        assert_eq!(
            pick("llama", &["[INST]"], "tekken", "Mistral Nemo"),
            "mistral-v3-tekken"
        );
        assert_eq!(pick("llama", &["[INST]"], "", ""), "mistral-v3");
        assert_eq!(
            pick("llama", &["<s>"], "", "Mistral-7B-Instruct-v0.2"),
            "mistral-v1"
        );
        assert_eq!(pick("llama", &["<s>"], "", "Llama-2-7b-chat"), "chatml");
        assert_eq!(pick("mamba", &[], "", ""), "chatml");
        for name in names() {
            assert!(source(name).is_some());
        }
    }
}
