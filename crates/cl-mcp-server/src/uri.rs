//! URIs a client sends (`rootUri`, the roots of `roots/list`, the URI of
//! `resources/read`) and the `file://` URIs the server hands out.
//!
//! Percent-escapes are decoded by the `percent-encoding` crate into bytes;
//! the text is then required to be well formed (every `%` starts a `%XX`
//! escape) and to decode to UTF-8. Whatever a client sends, these functions
//! answer with a value or an error that says what is wrong: they never panic.

use std::fmt;
use std::path::{Path, PathBuf};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

/// Why a URI, or a part of one, cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UriError {
    /// It does not start with `file://`.
    NotFileUri,
    /// A `file://` URI whose path is not absolute or whose host is not the
    /// local one (`file:///x` and `file://localhost/x` are local).
    NotLocalPath,
    /// A `%` at this byte offset (of the decoded part) that is not followed
    /// by two hexadecimal digits.
    BadEscape { offset: usize },
    /// The escapes decode to bytes that are not UTF-8 text.
    NotUtf8,
    /// A file path with a NUL byte (`%00`), which no file name can hold.
    NulInPath,
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UriError::NotFileUri => write!(f, "it is not a file:// URI"),
            UriError::NotLocalPath => write!(
                f,
                "it does not name an absolute local path (file:///PATH or file://localhost/PATH)"
            ),
            UriError::BadEscape { offset } => write!(
                f,
                "the % at byte {offset} of its path does not start a %XX escape (two hexadecimal \
                 digits); a literal % is written %25"
            ),
            UriError::NotUtf8 => write!(
                f,
                "its %XX escapes decode to bytes that are not UTF-8 text; escape each byte of \
                 the UTF-8 encoding"
            ),
            UriError::NulInPath => write!(f, "its path contains a NUL byte (%00)"),
        }
    }
}

impl std::error::Error for UriError {}

/// Decodes the `%XX` escapes of `s` (a path or one segment of a URI).
pub fn percent_decode(s: &str) -> Result<String, UriError> {
    if let Some(offset) = malformed_escape(s.as_bytes()) {
        return Err(UriError::BadEscape { offset });
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| UriError::NotUtf8)
}

/// The offset of the first `%` not followed by two hexadecimal digits. The
/// crate passes such a `%` through as text; a client that sent one made a
/// mistake it should hear about rather than have its path silently differ.
fn malformed_escape(bytes: &[u8]) -> Option<usize> {
    let hex = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_hexdigit);
    bytes
        .iter()
        .enumerate()
        .find(|&(i, &b)| b == b'%' && !(hex(i + 1) && hex(i + 2)))
        .map(|(i, _)| i)
}

/// The local path a `file://` URI names.
pub fn file_uri_path(uri: &str) -> Result<PathBuf, UriError> {
    let rest = uri.strip_prefix("file://").ok_or(UriError::NotFileUri)?;
    // `file://localhost/x` and `file:///x` both name `/x`.
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    if !path.starts_with('/') {
        return Err(UriError::NotLocalPath);
    }
    let decoded = percent_decode(path)?;
    if decoded.contains('\0') {
        return Err(UriError::NulInPath);
    }
    Ok(PathBuf::from(decoded))
}

/// The local paths of the roots in a client's `roots/list` answer, in its
/// order. A root that names no usable path (not `file://`, broken escapes,
/// not UTF-8) is logged and passed over; an answer of another shape has
/// none.
pub fn root_paths(answer: &serde_json::Value) -> Vec<PathBuf> {
    let roots = answer.get("roots").and_then(serde_json::Value::as_array);
    roots
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uri")?.as_str())
        .filter_map(|uri| match file_uri_path(uri) {
            Ok(path) => Some(path),
            Err(e) => {
                tracing::warn!(uri, error = %e, "a root from the client is not usable; ignored");
                None
            }
        })
        .collect()
}

/// What a `file://` URI keeps as it is: letters, digits and `/-_.~`.
const FILE_URI_KEEPS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The `file://` URI of an absolute path, every other byte percent-encoded.
pub fn file_uri(path: &Path) -> String {
    let text = path.to_string_lossy();
    format!(
        "file://{}",
        percent_encoding::utf8_percent_encode(&text, FILE_URI_KEEPS)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_of_utf8_text() {
        assert_eq!(percent_decode("a%20b%C3%A9").unwrap(), "a b\u{e9}");
        assert_eq!(percent_decode("caf\u{e9}").unwrap(), "caf\u{e9}");
        assert_eq!(percent_decode("").unwrap(), "");
        assert_eq!(
            file_uri_path("file://localhost/x%2Fy").unwrap(),
            PathBuf::from("/x/y")
        );
    }

    #[test]
    fn broken_escapes_are_errors_never_panics() {
        // A `%` whose two following bytes run into a multi-byte character:
        // the hand-written decoder sliced inside the character and panicked.
        assert_eq!(
            percent_decode("/x%a\u{e9}"),
            Err(UriError::BadEscape { offset: 2 })
        );
        assert_eq!(
            percent_decode("/x%"),
            Err(UriError::BadEscape { offset: 2 })
        );
        assert_eq!(
            percent_decode("/a%2"),
            Err(UriError::BadEscape { offset: 2 })
        );
        assert_eq!(percent_decode("/%ff%fe"), Err(UriError::NotUtf8));
        assert_eq!(file_uri_path("file:///a%00b"), Err(UriError::NulInPath));
        assert_eq!(file_uri_path("http://x/"), Err(UriError::NotFileUri));
        assert_eq!(file_uri_path("file://host/x"), Err(UriError::NotLocalPath));
        assert_eq!(file_uri_path("file://"), Err(UriError::NotLocalPath));
    }

    #[test]
    fn file_uris_round_trip() {
        for p in ["/a b/c.lisp", "/caf\u{e9}/%41", "/x/y~z_-.", "/\u{1F600}?#"] {
            let uri = file_uri(Path::new(p));
            assert!(uri.is_ascii(), "{uri}");
            assert_eq!(file_uri_path(&uri).unwrap(), PathBuf::from(p), "{uri}");
        }
        assert_eq!(file_uri(Path::new("/a b")), "file:///a%20b");
    }

    #[test]
    fn roots_answers_keep_the_usable_roots_in_order() {
        let answer = serde_json::json!({"roots": [
            {"uri": "file:///x%a\u{e9}"}, {"uri": "file:///a%20b"}, {"name": "no uri"},
            {"uri": 7}, {"uri": "https://example.org/"}, {"uri": "file://localhost/c"},
        ]});
        assert_eq!(
            root_paths(&answer),
            [PathBuf::from("/a b"), PathBuf::from("/c")]
        );
        assert!(root_paths(&serde_json::json!({"roots": {"uri": "file:///a"}})).is_empty());
        assert!(root_paths(&serde_json::json!([])).is_empty());
    }

    /// A small deterministic generator (xorshift), so the loop below needs
    /// no dependency and every run checks the same inputs.
    struct Bytes(u64);

    impl Bytes {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        /// Text of up to 24 characters drawn mostly from what URIs hold
        /// (`%`, hex digits, `/`), with multi-byte characters and the rest
        /// of ASCII mixed in, so broken escapes meet character boundaries.
        fn text(&mut self) -> String {
            const PIECES: &[&str] = &[
                "%",
                "%",
                "%",
                "a",
                "F",
                "0",
                "9",
                "g",
                "/",
                "\u{e9}",
                "\u{20ac}",
                "\u{1F600}",
                "%C3",
                "%A9",
                "%ff",
                "%00",
                "%2",
                " ",
                "file://",
                "localhost",
            ];
            let len = self.next() % 25;
            (0..len)
                .map(|_| match self.next() % 4 {
                    0 => char::from_u32((self.next() % 0x80) as u32)
                        .unwrap()
                        .to_string(),
                    _ => PIECES[(self.next() % PIECES.len() as u64) as usize].to_string(),
                })
                .collect()
        }
    }

    /// What the crate's lenient decoder gives, for comparison: equal
    /// whenever ours accepts the text.
    fn lenient(s: &str) -> Vec<u8> {
        percent_encoding::percent_decode_str(s).collect()
    }

    #[test]
    fn decoding_random_text_never_panics_and_agrees_with_its_escapes() {
        let mut gen = Bytes(0x9E37_79B9_7F4A_7C15);
        for _ in 0..50_000 {
            let s = gen.text();
            match percent_decode(&s) {
                Ok(text) => {
                    assert_eq!(text.as_bytes(), lenient(&s), "{s:?}");
                    assert!(malformed_escape(s.as_bytes()).is_none(), "{s:?}");
                }
                Err(UriError::BadEscape { offset }) => {
                    assert_eq!(s.as_bytes()[offset], b'%', "{s:?}");
                }
                Err(UriError::NotUtf8) => {
                    assert!(std::str::from_utf8(&lenient(&s)).is_err(), "{s:?}")
                }
                Err(e) => panic!("{s:?}: {e}"),
            }
            for uri in [format!("file://{s}"), format!("file:///{s}"), s.clone()] {
                if let Ok(p) = file_uri_path(&uri) {
                    assert!(p.is_absolute(), "{uri:?}");
                    assert_eq!(file_uri_path(&file_uri(&p)), Ok(p), "{uri:?}");
                }
            }
        }
    }

    #[test]
    fn every_escape_byte_pair_is_handled() {
        // Every two-byte sequence after `%`, including the halves of
        // multi-byte characters, as raw bytes made into text where they can.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let raw = [b'/', b'%', a, b];
                if let Ok(s) = std::str::from_utf8(&raw) {
                    let _ = file_uri_path(&format!("file://{s}"));
                }
                let lossy = String::from_utf8_lossy(&raw);
                let _ = percent_decode(&lossy);
            }
        }
    }
}
