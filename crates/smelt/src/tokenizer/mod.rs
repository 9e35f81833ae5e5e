//! Tokenizers built from a GGUF's `tokenizer.ggml.*` metadata, matching
//! llama.cpp token for token.
