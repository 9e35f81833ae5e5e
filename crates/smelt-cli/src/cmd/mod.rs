//! One module per subcommand.

pub mod info;
pub mod quantize;
pub mod tokenize;
