//! Frames and messages: decoding arbitrary bytes never panics, never allocates past the
//! frame limit, and whatever decodes re-encodes to something that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxccl_bootstrap::wire::{read_message, Message};

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = Message::decode(data) {
        assert_eq!(Message::decode(&message.encode()).expect("re-encoded message decodes"), message);
    }
    // As a stream: a length prefix, then a body, with a small limit.
    let _ = read_message(&mut &data[..], 4096);
});
