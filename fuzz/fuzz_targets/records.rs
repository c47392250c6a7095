//! Feeds arbitrary bytes to the JSONL record parser and checks its
//! invariants (see `src/invariants.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tomlite_fuzz::invariants::check_jsonl(data);
});
