//! Chat templates: `tokenizer.chat_template` rendered with minijinja the way
//! Hugging Face's `apply_chat_template` does, plus built-in templates.
