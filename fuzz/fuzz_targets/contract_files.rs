//! libFuzzer entry for [`bertpipe::fuzz::contract_files`] (the target's logic lives in the library, so
//! `cargo test` replays it on stable: tests/fuzz_replay.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bertpipe::fuzz::contract_files(data));
