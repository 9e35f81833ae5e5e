//! Model architectures, written once against the backend contract.
