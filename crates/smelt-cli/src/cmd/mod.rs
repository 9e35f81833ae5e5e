//! One module per subcommand.

pub mod bench;
pub mod chat;
pub mod classify;
pub mod devices;
pub mod embed;
pub mod info;
pub mod perplexity;
pub mod pull;
pub mod quantize;
pub mod run;
pub mod sample;
pub mod sampling;
pub mod serve;
pub mod template;
pub mod tokenize;
pub mod train;
