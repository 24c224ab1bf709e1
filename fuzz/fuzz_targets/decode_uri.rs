//! Fuzz target: decoding the URIs a client sends (`rootUri`, the roots of a
//! `roots/list` answer, `resources/read`) never panics, accepts only what
//! has well-formed escapes and decodes to UTF-8, and gives back a path whose
//! `file://` URI decodes to the same path. Input that is JSON is also read
//! as a client's `roots/list` answer.
//!
//! Run from the repository root (stable toolchain):
//!   RUSTC_BOOTSTRAP=1 cargo fuzz run decode_uri -- -max_total_time=60
#![no_main]

use cl_mcp_server::protocol::uri::{file_uri, file_uri_path, percent_decode, root_paths, UriError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Clients send JSON strings, so URIs are text; invalid bytes become U+FFFD.
    let text = String::from_utf8_lossy(data);
    match percent_decode(&text) {
        Ok(decoded) => {
            let lenient: Vec<u8> = percent_encoding::percent_decode_str(&text).collect();
            assert_eq!(decoded.as_bytes(), lenient.as_slice());
        }
        Err(UriError::BadEscape { offset }) => assert_eq!(text.as_bytes()[offset], b'%'),
        Err(UriError::NotUtf8) => {}
        Err(e) => panic!("percent_decode gave {e:?}"),
    }
    // As a rootUri or a root, with and without the scheme the server expects.
    for uri in [text.to_string(), format!("file://{text}"), format!("file:///{text}")] {
        if let Ok(path) = file_uri_path(&uri) {
            assert!(path.is_absolute());
            assert_eq!(file_uri_path(&file_uri(&path)), Ok(path));
        }
    }
    if let Ok(answer) = serde_json::from_slice::<serde_json::Value>(data) {
        for path in root_paths(&answer) {
            assert!(path.is_absolute());
        }
    }
});
