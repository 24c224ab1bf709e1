//! What symbol a token names.

/// A symbol token decoded the way the standard reader (readtable case
/// `:upcase`) would: escapes removed, unescaped characters upcased, package
/// prefix split off. Numbers are not recognised; callers that care check the
/// node before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SymbolName {
    /// `None` for an unqualified symbol, `Some("KEYWORD")` for `:foo`,
    /// `Some("")` for `#:foo`, else the package prefix, decoded like the
    /// name.
    pub package: Option<String>,
    /// The symbol name.
    pub name: String,
    /// True for `pkg::name` (double colon).
    pub internal: bool,
}

impl SymbolName {
    /// Decodes the text of a `Token` or of an `Uninterned` node (`#:foo`
    /// gives package `Some("")`, like `data::Symbol`). Never fails:
    /// malformed escapes are taken literally.
    pub fn read(token: &str) -> SymbolName {
        let (uninterned, token) = match token.strip_prefix("#:") {
            Some(rest) => (true, rest),
            None => (false, token),
        };
        let mut package: Option<String> = uninterned.then(String::new);
        let mut internal = false;
        let mut current = String::with_capacity(token.len());
        let mut chars = token.chars().peekable();
        let mut in_bars = false;
        let mut colons_seen = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        current.push(next);
                    }
                }
                '|' => in_bars = !in_bars,
                ':' if !in_bars && !colons_seen && !uninterned => {
                    colons_seen = true;
                    if chars.peek() == Some(&':') {
                        chars.next();
                        internal = true;
                    }
                    let prefix = std::mem::take(&mut current);
                    package = Some(if prefix.is_empty() && token.starts_with(':') {
                        "KEYWORD".to_string()
                    } else {
                        prefix
                    });
                }
                c if in_bars => current.push(c),
                c => {
                    let mut up = c.to_uppercase();
                    // CL's char-upcase is one-to-one: keep characters whose
                    // upper case is several characters (German sharp s).
                    match (up.next(), up.next()) {
                        (Some(u), None) => current.push(u),
                        _ => current.push(c),
                    }
                }
            }
        }
        SymbolName {
            package,
            name: current,
            internal,
        }
    }
}
