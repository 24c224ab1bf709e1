//! Output capping shared by every tool: results never exceed the limit the
//! caller set, and the cut is always announced.

use std::borrow::Cow;

/// Default cap per output stream (`maxOutputLength`), in characters.
pub const DEFAULT_MAX_OUTPUT: usize = 50_000;

/// Caps `text` at `max_chars` characters, appending
/// `[truncated N characters]` when anything was cut.
pub fn cap_output(text: &str, max_chars: usize) -> Cow<'_, str> {
    // Fast path: byte length bounds char count.
    if text.len() <= max_chars {
        return Cow::Borrowed(text);
    }
    match text.char_indices().nth(max_chars) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => {
            let dropped = text[cut..].chars().count();
            Cow::Owned(format!(
                "{}\n[truncated {dropped} characters]",
                &text[..cut]
            ))
        }
    }
}

/// `n` and the noun, singular for one: "1 Lisp file", "3 Lisp files".
pub fn counted(n: usize, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_by_characters() {
        assert_eq!(cap_output("héllo", 10), "héllo");
        assert_eq!(cap_output("héllo", 2), "hé\n[truncated 3 characters]");
    }
}
