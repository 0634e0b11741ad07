//! libFuzzer entry for [`bertpipe::fuzz::experiment_yaml`] (the target's logic lives in the library, so
//! `cargo test` replays it on stable: tests/fuzz_replay.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bertpipe::fuzz::experiment_yaml(data));
