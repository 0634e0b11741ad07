//! Issue 52's and issue 66's read-and-break defects, each held by a test that failed before its fix: one
//! module per area, so the binary is linked once.
#[path = "../common/mod.rs"]
mod common;

mod chain_env;
mod chain_keys;
mod chain_order;
mod export_vocab;
mod labels;
mod rowstore;
mod sources;
mod tokenizer;
mod yaml_limits;
