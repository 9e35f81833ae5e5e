//! Built-in chat templates for models whose GGUF carries no
//! `tokenizer.chat_template`, chosen by name (`--chat-template NAME`) or by
//! the model's architecture.
//!
//! Each is the format its model card documents, written as a Jinja
//! template so it renders through the same engine as a GGUF's own.

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

/// Every built-in template, by name.
pub const BUILTINS: &[(&str, &str)] = &[("chatml", CHATML), ("llama3", LLAMA3), ("gemma", GEMMA)];

/// The source of the built-in template `name`.
pub fn source(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The names of the built-in templates, for error messages and `--help`.
pub fn names() -> Vec<&'static str> {
    BUILTINS.iter().map(|(n, _)| *n).collect()
}

/// The built-in template for a model without its own: by architecture, and
/// for the `llama` architecture by whether the vocabulary has Llama 3's
/// header tokens (Llama 2 style models get ChatML, as in llama.cpp).
pub fn for_model(architecture: &str, has_llama3_tokens: bool) -> &'static str {
    match architecture {
        a if a.starts_with("gemma") => "gemma",
        "llama" if has_llama3_tokens => "llama3",
        _ => "chatml",
    }
}
