//! The generation loop: prefill, decode, stop rules and streaming.
