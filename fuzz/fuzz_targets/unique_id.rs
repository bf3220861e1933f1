//! Unique ids: decoding arbitrary bytes or hex never panics; valid ids round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxccl_bootstrap::UniqueId;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = UniqueId::from_bytes(data) {
        assert_eq!(&id.to_bytes()[..], data);
        assert_eq!(UniqueId::from_hex(&id.to_hex()).expect("hex round trip"), id);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = UniqueId::from_hex(text);
    }
});
