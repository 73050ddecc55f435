//! Nothing to import: the examples are the programs beside this file (`cargo run --example wap`).
//! A package needs one library or binary target; this is it.
