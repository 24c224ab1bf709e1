//! Lisp data as values: the printed forms Swank sends back.
//!
//! This is a reader for *data* printed by `prin1` (what Swank puts on the
//! wire), not for source files: it has no comments, no `#+`/`#-`, no reader
//! macros beyond the ones `prin1` produces. Unreadable objects (`#<...>`) are
//! kept as opaque text instead of failing the whole message, because Swank
//! happily prints them inside otherwise readable replies.
//!
//! The other direction lives here too: [`lisp_string`] and the [`Value`]
//! constructors plus [`std::fmt::Display`] build request forms that the Lisp
//! reader reads back exactly, so no caller ever splices raw text into a form.

use std::fmt;

/// A symbol as read: its package prefix (if any) and its name after the
/// reader's case conversion (unescaped characters are upcased, as the
/// standard readtable does).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// `None` for an unqualified symbol, `Some("KEYWORD")` for `:foo`,
    /// `Some("")` for an uninterned `#:foo`, else the package prefix as read.
    pub package: Option<String>,
    /// The symbol name, case-converted like the Lisp reader does.
    pub name: String,
}

impl Symbol {
    /// True for `:name` symbols.
    pub fn is_keyword(&self) -> bool {
        self.package.as_deref() == Some("KEYWORD")
    }
}

/// A Lisp datum.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Any symbol, including `nil`, `t` and keywords.
    Symbol(Symbol),
    /// A string, escapes resolved.
    String(String),
    /// An integer that fits in an `i64`.
    Integer(i64),
    /// An integer too large for `i64`, kept as its decimal text (sign included).
    BigInteger(String),
    /// A ratio such as `1/3`, kept as text (`numerator/denominator`).
    Ratio(String),
    /// A float: its printed text (e.g. `1.5d0`) and the nearest `f64`.
    Float {
        /// The text as printed by Lisp.
        text: String,
        /// Its value as an `f64` (may be infinite for huge exponents).
        value: f64,
    },
    /// A character such as `#\a` or `#\Space`.
    Char(char),
    /// A proper list (`tail == None`) or a dotted list (`(a b . c)`).
    /// The empty list `()` is `List(vec![], None)`.
    List(Vec<Value>, Option<Box<Value>>),
    /// A simple vector `#(...)`.
    Vector(Vec<Value>),
    /// A pathname `#P"..."`; the namestring.
    Pathname(String),
    /// An unreadable object `#<...>`, kept verbatim including `#<` and `>`;
    /// also other `#` syntax this reader does not model (`#C(1 2)`,
    /// `#S(...)`, `#.(...)`, `#*101`), kept as its text.
    Unreadable(String),
}

/// Why a text could not be read as Lisp data, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read Lisp data at byte {offset}: {problem}")]
pub struct DataError {
    /// Byte offset in the input where the problem was found.
    pub offset: usize,
    /// What was wrong.
    pub problem: DataProblem,
}

/// What was wrong with a text read as Lisp data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataProblem {
    /// More text after the one datum [`read`] takes.
    #[error("trailing text after the datum")]
    TrailingText,
    /// The input ended where a datum should start.
    #[error("unexpected end of input")]
    UnexpectedEnd,
    /// A `)` where a datum should start.
    #[error("unexpected ')'")]
    UnexpectedClose,
    /// A `(` never closed.
    #[error("unclosed list")]
    UnclosedList,
    /// More than one datum after a consing dot.
    #[error("expected ')' after dotted tail")]
    DottedTail,
    /// A `"` never closed.
    #[error("unclosed string")]
    UnclosedString,
    /// `#(a . b)`.
    #[error("dotted list in a vector")]
    DottedVector,
    /// `#P` not followed by a string.
    #[error("expected a string after #P")]
    PathnameWithoutString,
    /// A dispatch macro this reader does not know.
    #[error("unsupported reader macro #{0}")]
    UnsupportedDispatch(char),
    /// The input ended right after `#`.
    #[error("unexpected end of input after #")]
    EndAfterHash,
    /// A `#<` never closed.
    #[error("unclosed #<")]
    UnclosedUnreadable,
    /// The input ended right after `#\`.
    #[error("unexpected end of input after #\\")]
    EndAfterCharacterPrefix,
    /// The input ended right after a `\` in a token.
    #[error("end of input after \\")]
    EndAfterEscape,
    /// A `|` in a token never closed.
    #[error("unclosed |")]
    UnclosedMultipleEscape,
    /// A token with no characters.
    #[error("empty token")]
    EmptyToken,
    /// A token of dots only outside a consing dot.
    #[error("a token of dots only")]
    DotsOnly,
    /// `a:b:c`.
    #[error("too many package markers in symbol")]
    TooManyPackageMarkers,
}

/// Reads exactly one datum from `text` (surrounding whitespace allowed).
pub fn read(text: &str) -> Result<Value, DataError> {
    let mut r = Reader { src: text, pos: 0 };
    let v = r.datum()?;
    r.skip_ws();
    if r.pos != text.len() {
        return Err(r.err(DataProblem::TrailingText));
    }
    Ok(v)
}

/// Reads every datum in `text`, in order.
pub fn read_all(text: &str) -> Result<Vec<Value>, DataError> {
    let mut r = Reader { src: text, pos: 0 };
    let mut out = Vec::new();
    loop {
        r.skip_ws();
        if r.pos == text.len() {
            return Ok(out);
        }
        out.push(r.datum()?);
    }
}

/// Prints `s` as a Lisp string literal: `"` and `\` are escaped, everything
/// else (newlines, Unicode) is taken literally by the Lisp reader.
pub fn lisp_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

struct Reader<'a> {
    src: &'a str,
    pos: usize,
}

fn is_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '"' | '\'' | '`' | ',' | ';')
}

impl<'a> Reader<'a> {
    fn err(&self, problem: DataProblem) -> DataError {
        DataError {
            offset: self.pos,
            problem,
        }
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.src[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn datum(&mut self) -> Result<Value, DataError> {
        self.skip_ws();
        let c = self
            .peek()
            .ok_or_else(|| self.err(DataProblem::UnexpectedEnd))?;
        match c {
            '(' => {
                self.bump();
                self.list()
            }
            ')' => Err(self.err(DataProblem::UnexpectedClose)),
            '"' => {
                self.bump();
                Ok(Value::String(self.string_body()?))
            }
            '\'' => {
                self.bump();
                Ok(Value::wrap("QUOTE", self.datum()?))
            }
            '`' => {
                self.bump();
                Ok(Value::wrap("QUASIQUOTE", self.datum()?))
            }
            ',' => {
                self.bump();
                if self.peek() == Some('@') {
                    self.bump();
                    Ok(Value::wrap("UNQUOTE-SPLICING", self.datum()?))
                } else {
                    Ok(Value::wrap("UNQUOTE", self.datum()?))
                }
            }
            '#' => self.dispatch(),
            _ => self.token_datum(),
        }
    }

    fn list(&mut self) -> Result<Value, DataError> {
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None => return Err(self.err(DataProblem::UnclosedList)),
                Some(')') => {
                    self.bump();
                    return Ok(Value::List(items, None));
                }
                Some('.') if !items.is_empty() && self.peek2().is_none_or(is_terminator) => {
                    self.bump();
                    let tail = self.datum()?;
                    self.skip_ws();
                    if self.bump() != Some(')') {
                        return Err(self.err(DataProblem::DottedTail));
                    }
                    // `(a . (b c))` is the proper list `(a b c)`.
                    return Ok(match tail {
                        Value::List(more, t) => {
                            items.extend(more);
                            Value::List(items, t)
                        }
                        other => Value::List(items, Some(Box::new(other))),
                    });
                }
                Some(_) => items.push(self.datum()?),
            }
        }
    }

    /// Reads the rest of a string after its opening quote.
    fn string_body(&mut self) -> Result<String, DataError> {
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(self.err(DataProblem::UnclosedString)),
                Some('"') => return Ok(s),
                Some('\\') => match self.bump() {
                    None => return Err(self.err(DataProblem::UnclosedString)),
                    Some(c) => s.push(c),
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn dispatch(&mut self) -> Result<Value, DataError> {
        let start = self.pos;
        self.bump(); // '#'
        match self.bump() {
            Some('(') => match self.list()? {
                Value::List(items, None) => Ok(Value::Vector(items)),
                _ => Err(DataError {
                    offset: start,
                    problem: DataProblem::DottedVector,
                }),
            },
            Some('\\') => self.character(),
            Some('\'') => Ok(Value::wrap("FUNCTION", self.datum()?)),
            Some('P') | Some('p') => {
                if self.bump() != Some('"') {
                    return Err(self.err(DataProblem::PathnameWithoutString));
                }
                Ok(Value::Pathname(self.string_body()?))
            }
            Some(':') => {
                let (name, _) = self.token_text()?;
                Ok(Value::Symbol(Symbol {
                    package: Some(String::new()),
                    name,
                }))
            }
            Some('<') => self.unreadable(start),
            // Other dispatch macros `prin1` can produce (`#C(1 2)`, `#.(...)`
            // for infinities, `#S(...)`, `#A(...)`, `#*101`): kept as text
            // like unreadable objects instead of failing the whole message.
            Some(c) if c.is_ascii_alphabetic() || c == '.' || c == '*' => {
                if c != '*' {
                    self.datum()?;
                } else {
                    while self.peek().is_some_and(|d| d == '0' || d == '1') {
                        self.bump();
                    }
                }
                Ok(Value::Unreadable(self.src[start..self.pos].to_string()))
            }
            Some(c) => Err(DataError {
                offset: start,
                problem: DataProblem::UnsupportedDispatch(c),
            }),
            None => Err(self.err(DataProblem::EndAfterHash)),
        }
    }

    /// `#<...>` up to its matching `>`, counting nested `#<` and skipping
    /// strings, so `#<A #<B> "x>y">` is one object.
    fn unreadable(&mut self, start: usize) -> Result<Value, DataError> {
        let mut depth = 1;
        while depth > 0 {
            match self.bump() {
                None => {
                    return Err(DataError {
                        offset: start,
                        problem: DataProblem::UnclosedUnreadable,
                    })
                }
                Some('#') if self.peek() == Some('<') => {
                    self.bump();
                    depth += 1;
                }
                Some('>') => depth -= 1,
                Some('"') => {
                    self.string_body()?;
                }
                Some(_) => {}
            }
        }
        Ok(Value::Unreadable(self.src[start..self.pos].to_string()))
    }

    fn character(&mut self) -> Result<Value, DataError> {
        let start = self.pos;
        let first = self
            .bump()
            .ok_or_else(|| self.err(DataProblem::EndAfterCharacterPrefix))?;
        while let Some(c) = self.peek() {
            if is_terminator(c) {
                break;
            }
            self.bump();
        }
        let text = &self.src[start..self.pos];
        if text.len() == first.len_utf8() {
            return Ok(Value::Char(first));
        }
        // A name this reader does not know (SBCL prints some characters by
        // their Unicode name) is kept as text rather than failing the message.
        Ok(char_by_name(text)
            .map(Value::Char)
            .unwrap_or_else(|| Value::Unreadable(format!("#\\{text}"))))
    }

    /// Reads a token: returns its case-converted text and whether any part
    /// was escaped (an escaped token is never a number). A `:` outside
    /// escapes is returned as-is for the caller to split.
    fn token_text(&mut self) -> Result<(String, bool), DataError> {
        let mut out = String::new();
        let mut escaped = false;
        while let Some(c) = self.peek() {
            if is_terminator(c) {
                break;
            }
            self.bump();
            match c {
                '\\' => {
                    escaped = true;
                    let e = self
                        .bump()
                        .ok_or_else(|| self.err(DataProblem::EndAfterEscape))?;
                    out.push(e);
                }
                '|' => {
                    escaped = true;
                    loop {
                        match self.bump() {
                            None => return Err(self.err(DataProblem::UnclosedMultipleEscape)),
                            Some('|') => break,
                            Some('\\') => {
                                let e = self
                                    .bump()
                                    .ok_or_else(|| self.err(DataProblem::EndAfterEscape))?;
                                out.push(e);
                            }
                            Some(e) => out.push(e),
                        }
                    }
                }
                // Colons are kept in a marker form so escaped colons (pushed
                // above) are not mistaken for package separators.
                ':' => out.push('\u{0}'),
                c => out.extend(c.to_uppercase()),
            }
        }
        Ok((out, escaped))
    }

    fn token_datum(&mut self) -> Result<Value, DataError> {
        let start = self.pos;
        let (text, escaped) = self.token_text()?;
        if text.is_empty() {
            return Err(self.err(DataProblem::EmptyToken));
        }
        if !escaped && !text.contains('\u{0}') {
            if let Some(n) = parse_number(&text) {
                return Ok(n);
            }
            if text.chars().all(|c| c == '.') {
                return Err(DataError {
                    offset: start,
                    problem: DataProblem::DotsOnly,
                });
            }
        }
        let parts: Vec<&str> = text.split('\u{0}').collect();
        let sym = match parts.as_slice() {
            [name] => Symbol {
                package: None,
                name: name.to_string(),
            },
            ["", name] | ["", "", name] => Symbol {
                package: Some("KEYWORD".into()),
                name: name.to_string(),
            },
            [pkg, name] | [pkg, "", name] => Symbol {
                package: Some(pkg.to_string()),
                name: name.to_string(),
            },
            _ => {
                return Err(DataError {
                    offset: start,
                    problem: DataProblem::TooManyPackageMarkers,
                })
            }
        };
        Ok(Value::Symbol(sym))
    }
}

fn parse_number(t: &str) -> Option<Value> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    // Integer, optionally with a trailing decimal point (`12.` is decimal 12).
    let int_part = unsigned.strip_suffix('.').unwrap_or(unsigned);
    if digits(int_part) {
        let text = if unsigned.len() != int_part.len() {
            &t[..t.len() - 1]
        } else {
            t
        };
        let text = text.strip_prefix('+').unwrap_or(text);
        return Some(match text.parse::<i64>() {
            Ok(n) => Value::Integer(n),
            Err(_) => Value::BigInteger(text.to_string()),
        });
    }
    if let Some((n, d)) = unsigned.split_once('/') {
        if digits(n) && digits(d) {
            return Some(Value::Ratio(t.strip_prefix('+').unwrap_or(t).to_string()));
        }
        return None;
    }
    // Float: [sign] digits* [. digits*] [marker [sign] digits], with at least
    // one digit in the mantissa and either a point-with-fraction or an exponent.
    let (mantissa, exponent) = match unsigned.find(['E', 'S', 'F', 'D', 'L']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let (whole, frac) = match mantissa.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (mantissa, None),
    };
    let ok_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !ok_digits(whole)
        || !frac.is_none_or(ok_digits)
        || whole.is_empty() && frac.is_none_or(str::is_empty)
    {
        return None;
    }
    match exponent {
        Some(e) => {
            let e_digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if !digits(e_digits) {
                return None;
            }
        }
        None => {
            if frac.is_none_or(str::is_empty) {
                return None;
            }
        }
    }
    let sign = if t.starts_with('-') { "-" } else { "" };
    let rust = format!(
        "{sign}{}.{}e{}",
        if whole.is_empty() { "0" } else { whole },
        frac.filter(|f| !f.is_empty()).unwrap_or("0"),
        exponent.unwrap_or("0")
    );
    let value = rust.parse::<f64>().ok()?;
    Some(Value::Float {
        text: t.to_lowercase(),
        value,
    })
}

const CHAR_NAMES: &[(&str, char)] = &[
    ("SPACE", ' '),
    ("NEWLINE", '\n'),
    ("LINEFEED", '\n'),
    ("TAB", '\t'),
    ("RETURN", '\r'),
    ("PAGE", '\u{c}'),
    ("BACKSPACE", '\u{8}'),
    ("RUBOUT", '\u{7f}'),
    ("DEL", '\u{7f}'),
    ("NUL", '\0'),
    ("NULL", '\0'),
    ("ESCAPE", '\u{1b}'),
    ("ESC", '\u{1b}'),
    ("BELL", '\u{7}'),
    // SBCL's names for the other ASCII control characters.
    ("SOH", '\u{1}'),
    ("STX", '\u{2}'),
    ("ETX", '\u{3}'),
    ("EOT", '\u{4}'),
    ("ENQ", '\u{5}'),
    ("ACK", '\u{6}'),
    ("BEL", '\u{7}'),
    ("VT", '\u{b}'),
    ("SO", '\u{e}'),
    ("SI", '\u{f}'),
    ("DLE", '\u{10}'),
    ("DC1", '\u{11}'),
    ("DC2", '\u{12}'),
    ("DC3", '\u{13}'),
    ("DC4", '\u{14}'),
    ("NAK", '\u{15}'),
    ("SYN", '\u{16}'),
    ("ETB", '\u{17}'),
    ("CAN", '\u{18}'),
    ("EM", '\u{19}'),
    ("SUB", '\u{1a}'),
    ("FS", '\u{1c}'),
    ("GS", '\u{1d}'),
    ("RS", '\u{1e}'),
    ("US", '\u{1f}'),
];

fn char_by_name(name: &str) -> Option<char> {
    let upper = name.to_uppercase();
    if let Some((_, c)) = CHAR_NAMES.iter().find(|(n, _)| *n == upper) {
        return Some(*c);
    }
    // SBCL prints unnamed characters as U+XXXX or UXXXX.
    let hex = upper
        .strip_prefix("U+")
        .or_else(|| upper.strip_prefix('U'))?;
    u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
}

impl Value {
    /// A symbol from Lisp-reader text such as `"swank:eval-and-grab-output"`
    /// or `":ok"`. Panics if `text` is not a symbol: it is meant for names
    /// written in the program, not for user input (use [`Value::symbol_named`]).
    pub fn symbol(text: &str) -> Value {
        match read(text) {
            Ok(v @ Value::Symbol(_)) => v,
            _ => panic!("not a symbol: {text:?}"),
        }
    }

    /// A symbol with this exact name (no case conversion) in `package`.
    pub fn symbol_named(package: Option<&str>, name: &str) -> Value {
        Value::Symbol(Symbol {
            package: package.map(str::to_string),
            name: name.to_string(),
        })
    }

    /// The keyword `:name`, upcased like the reader would.
    pub fn keyword(name: &str) -> Value {
        Value::symbol_named(Some("KEYWORD"), &name.to_uppercase())
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// A proper list.
    pub fn list(items: impl IntoIterator<Item = Value>) -> Value {
        Value::List(items.into_iter().collect(), None)
    }

    /// `nil`.
    pub fn nil() -> Value {
        Value::symbol_named(None, "NIL")
    }

    /// `t`.
    pub fn t() -> Value {
        Value::symbol_named(None, "T")
    }

    /// `t` or `nil`.
    pub fn bool(b: bool) -> Value {
        if b {
            Value::t()
        } else {
            Value::nil()
        }
    }

    fn wrap(op: &str, v: Value) -> Value {
        Value::List(vec![Value::symbol_named(None, op), v], None)
    }

    /// True for `nil` (any of `nil`, `cl:nil`, `()`).
    pub fn is_nil(&self) -> bool {
        match self {
            Value::List(items, None) => items.is_empty(),
            Value::Symbol(s) => s.name == "NIL" && is_cl_or_none(&s.package),
            _ => false,
        }
    }

    /// True for the symbol `t`.
    pub fn is_t(&self) -> bool {
        matches!(self, Value::Symbol(s) if s.name == "T" && is_cl_or_none(&s.package))
    }

    /// The elements of a proper list; `nil` is the empty list.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items, None) => Some(items),
            v if v.is_nil() => Some(&[]),
            _ => None,
        }
    }

    /// The contents of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, when it fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// The symbol, if this is one.
    pub fn as_symbol(&self) -> Option<&Symbol> {
        match self {
            Value::Symbol(s) => Some(s),
            _ => None,
        }
    }

    /// The name of a symbol (without package), e.g. `"OK"` for `:ok`.
    pub fn as_symbol_name(&self) -> Option<&str> {
        self.as_symbol().map(|s| s.name.as_str())
    }

    /// True if this is the keyword `:name` (case-insensitive).
    pub fn is_keyword(&self, name: &str) -> bool {
        matches!(self, Value::Symbol(s) if s.is_keyword() && s.name.eq_ignore_ascii_case(name))
    }

    /// In a property list `(:a 1 :b 2)`, the value after keyword `key`
    /// (given with or without the leading colon, any case).
    pub fn plist_get(&self, key: &str) -> Option<&Value> {
        let key = key.strip_prefix(':').unwrap_or(key);
        self.as_list()?
            .chunks(2)
            .find(|kv| kv[0].is_keyword(key))
            .and_then(|kv| kv.get(1))
    }
}

fn is_cl_or_none(p: &Option<String>) -> bool {
    matches!(p.as_deref(), None | Some("CL") | Some("COMMON-LISP"))
}

/// Whether a symbol name can be printed without `|...|`: every character
/// reads back as itself and the whole token is not a number.
fn needs_bars(name: &str) -> bool {
    name.is_empty()
        || name.chars().any(|c| {
            is_terminator(c)
                || matches!(c, '|' | '\\' | ':' | '#')
                || c.is_control()
                || c.to_uppercase().ne(std::iter::once(c))
        })
        || parse_number(name).is_some()
        || name.chars().all(|c| c == '.')
}

fn write_symbol_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if !needs_bars(name) {
        return f.write_str(name);
    }
    f.write_str("|")?;
    for c in name.chars() {
        if c == '|' || c == '\\' {
            f.write_str("\\")?;
        }
        write!(f, "{c}")?;
    }
    f.write_str("|")
}

/// Prints the value so that the Lisp reader reads it back as the same datum
/// (unreadable objects are printed as they came and will not read back).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Symbol(s) => {
                match s.package.as_deref() {
                    None => {}
                    Some("KEYWORD") => f.write_str(":")?,
                    Some("") => f.write_str("#:")?,
                    Some(p) => {
                        write_symbol_name(f, p)?;
                        // `::` reads both internal and external symbols.
                        f.write_str("::")?;
                    }
                }
                write_symbol_name(f, &s.name)
            }
            Value::String(s) => f.write_str(&lisp_string(s)),
            Value::Integer(n) => write!(f, "{n}"),
            Value::BigInteger(t) | Value::Ratio(t) => f.write_str(t),
            Value::Float { text, .. } => f.write_str(text),
            Value::Char(c) => match CHAR_NAMES.iter().find(|(_, ch)| ch == c) {
                Some((name, _)) if !c.is_alphanumeric() => write!(f, "#\\{name}"),
                _ if c.is_control() => write!(f, "#\\U{:X}", *c as u32),
                _ => write!(f, "#\\{c}"),
            },
            Value::List(items, tail) => {
                f.write_str("(")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{v}")?;
                }
                if let Some(t) = tail {
                    write!(f, " . {t}")?;
                }
                f.write_str(")")
            }
            Value::Vector(items) => {
                f.write_str("#")?;
                write!(f, "{}", Value::List(items.clone(), None))
            }
            Value::Pathname(p) => write!(f, "#P{}", lisp_string(p)),
            Value::Unreadable(t) => f.write_str(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(pkg: Option<&str>, name: &str) -> Value {
        Value::symbol_named(pkg, name)
    }

    #[test]
    fn reads_swank_return() {
        let v = read(r#"(:return (:ok ("3" "héllo")) 12)"#).unwrap();
        let l = v.as_list().unwrap();
        assert!(l[0].is_keyword("return"));
        assert_eq!(l[2].as_i64(), Some(12));
        let ok = l[1].as_list().unwrap();
        assert!(ok[0].is_keyword("OK"));
        assert_eq!(ok[1].as_list().unwrap()[1].as_str(), Some("héllo"));
    }

    #[test]
    fn symbols_and_packages() {
        assert_eq!(read("foo").unwrap(), sym(None, "FOO"));
        assert_eq!(
            read("swank::foo-bar").unwrap(),
            sym(Some("SWANK"), "FOO-BAR")
        );
        assert_eq!(read("cl:car").unwrap(), sym(Some("CL"), "CAR"));
        assert_eq!(read(":key").unwrap(), sym(Some("KEYWORD"), "KEY"));
        assert_eq!(read("#:gensym").unwrap(), sym(Some(""), "GENSYM"));
        assert_eq!(read("|Mixed Case|").unwrap(), sym(None, "Mixed Case"));
        assert_eq!(read(r"a\bc").unwrap(), sym(None, "AbC"));
        assert_eq!(read(r"|a\|b|").unwrap(), sym(None, "a|b"));
        assert_eq!(read(r"pkg::|x:y|").unwrap(), sym(Some("PKG"), "x:y"));
        assert_eq!(read(r"|123|").unwrap(), sym(None, "123"));
        assert!(read("a:b:c").is_err());
    }

    #[test]
    fn nil_and_t() {
        assert!(read("nil").unwrap().is_nil());
        assert!(read("NIL").unwrap().is_nil());
        assert!(read("()").unwrap().is_nil());
        assert!(read("cl:nil").unwrap().is_nil());
        assert!(!read("|nil|").unwrap().is_nil());
        assert!(read("t").unwrap().is_t());
        assert_eq!(read("nil").unwrap().as_list(), Some(&[][..]));
    }

    #[test]
    fn strings_with_escapes() {
        assert_eq!(read(r#""a\"b\\c""#).unwrap().as_str(), Some("a\"b\\c"));
        assert_eq!(
            read("\"line\nbreak\"").unwrap().as_str(),
            Some("line\nbreak")
        );
        assert_eq!(read(r#""\x""#).unwrap().as_str(), Some("x"));
        assert!(read(r#""open"#).is_err());
    }

    #[test]
    fn numbers() {
        assert_eq!(read("42").unwrap(), Value::Integer(42));
        assert_eq!(read("-7").unwrap(), Value::Integer(-7));
        assert_eq!(read("+7").unwrap(), Value::Integer(7));
        assert_eq!(read("10.").unwrap(), Value::Integer(10));
        let big = "123456789012345678901234567890";
        assert_eq!(read(big).unwrap(), Value::BigInteger(big.into()));
        assert_eq!(read("-1/3").unwrap(), Value::Ratio("-1/3".into()));
        match read("1.5d0").unwrap() {
            Value::Float { text, value } => {
                assert_eq!(text, "1.5d0");
                assert_eq!(value, 1.5);
            }
            v => panic!("{v:?}"),
        }
        assert!(matches!(read("-.5").unwrap(), Value::Float { value, .. } if value == -0.5));
        assert!(matches!(read("1e3").unwrap(), Value::Float { value, .. } if value == 1000.0));
        assert!(matches!(read("2.5E-1").unwrap(), Value::Float { value, .. } if value == 0.25));
        // Not numbers: these are symbols.
        assert_eq!(read("1+").unwrap(), sym(None, "1+"));
        assert_eq!(read("-").unwrap(), sym(None, "-"));
        assert_eq!(read("1/").unwrap(), sym(None, "1/"));
        assert_eq!(read("e5").unwrap(), sym(None, "E5"));
    }

    #[test]
    fn characters() {
        assert_eq!(read(r"#\a").unwrap(), Value::Char('a'));
        assert_eq!(read(r"#\A").unwrap(), Value::Char('A'));
        assert_eq!(read(r"#\Space").unwrap(), Value::Char(' '));
        assert_eq!(read(r"#\newline").unwrap(), Value::Char('\n'));
        assert_eq!(read(r"#\(").unwrap(), Value::Char('('));
        assert_eq!(read(r"#\)").unwrap(), Value::Char(')'));
        assert_eq!(read(r"#\é").unwrap(), Value::Char('é'));
        assert_eq!(read(r"#\U1F600").unwrap(), Value::Char('😀'));
        assert_eq!(
            read(r"(#\a #\b)").unwrap(),
            Value::list([Value::Char('a'), Value::Char('b')])
        );
        assert_eq!(read(r"#\Etx").unwrap(), Value::Char('\u{3}'));
        assert_eq!(read(r"#\Us").unwrap(), Value::Char('\u{1f}'));
        assert_eq!(
            read(r"#\Padding_Character").unwrap(),
            Value::Unreadable(r"#\Padding_Character".into())
        );
    }

    #[test]
    fn lists_vectors_dotted() {
        let v = read("(a . b)").unwrap();
        assert_eq!(
            v,
            Value::List(vec![sym(None, "A")], Some(Box::new(sym(None, "B"))))
        );
        assert_eq!(v.as_list(), None);
        assert_eq!(read("(a . (b))").unwrap(), read("(a b)").unwrap());
        assert_eq!(read("(a .5)").unwrap().as_list().unwrap().len(), 2);
        assert_eq!(
            read("#(1 2)").unwrap(),
            Value::Vector(vec![Value::Integer(1), Value::Integer(2)])
        );
        assert_eq!(read("#()").unwrap(), Value::Vector(vec![]));
        assert!(read("(a b").is_err());
        assert!(read(")").is_err());
        assert!(read("(. a)").is_err());
        assert!(read("a b").is_err());
    }

    #[test]
    fn quotes_and_pathnames() {
        assert_eq!(
            read("'x").unwrap(),
            Value::list([sym(None, "QUOTE"), sym(None, "X")])
        );
        assert_eq!(
            read("#'car").unwrap(),
            Value::list([sym(None, "FUNCTION"), sym(None, "CAR")])
        );
        assert_eq!(
            read(r#"#P"/tmp/a b.lisp""#).unwrap(),
            Value::Pathname("/tmp/a b.lisp".into())
        );
    }

    #[test]
    fn unreadable_objects() {
        let v = read(r#"(1 #<A #<B c> "x>y"> 2)"#).unwrap();
        let l = v.as_list().unwrap();
        assert_eq!(l[1], Value::Unreadable(r#"#<A #<B c> "x>y">"#.into()));
        assert_eq!(l[2], Value::Integer(2));
        assert!(read("#<open").is_err());
        let v =
            read("(#C(1 2) #.(sb-kernel:make-double-float -524288 0) #*101 #S(p :x 1) 3)").unwrap();
        let l = v.as_list().unwrap();
        assert_eq!(l[0], Value::Unreadable("#C(1 2)".into()));
        assert_eq!(l[2], Value::Unreadable("#*101".into()));
        assert_eq!(l[3], Value::Unreadable("#S(p :x 1)".into()));
        assert_eq!(l[4], Value::Integer(3));
        assert!(read("#!x").is_err());
    }

    #[test]
    fn plist_lookup() {
        let v = read(r#"(:name "x" :Value 3 :flag)"#).unwrap();
        assert_eq!(v.plist_get("name").and_then(Value::as_str), Some("x"));
        assert_eq!(v.plist_get(":VALUE").and_then(Value::as_i64), Some(3));
        assert_eq!(v.plist_get("flag"), None);
        assert_eq!(v.plist_get("missing"), None);
    }

    #[test]
    fn lisp_string_escapes() {
        assert_eq!(lisp_string(r#"a"b\c"#), r#""a\"b\\c""#);
        let s = "tricky \" \\ \n ) ( ; héllo→😀";
        assert_eq!(read(&lisp_string(s)).unwrap().as_str(), Some(s));
    }

    #[test]
    fn printing_round_trips() {
        let form = Value::list([
            Value::symbol("swank:eval-and-grab-output"),
            Value::string("(+ 1 \"2\")"),
            Value::keyword("ok"),
            Value::symbol_named(Some("CL-USER"), "weird name|"),
            Value::symbol_named(None, "123"),
            Value::symbol_named(None, "NIL"),
            Value::Char(' '),
            Value::Char('x'),
            Value::Pathname("/a\"b".into()),
            Value::Vector(vec![Value::Integer(-1)]),
            Value::List(vec![Value::Integer(1)], Some(Box::new(Value::Integer(2)))),
        ]);
        let text = form.to_string();
        assert!(
            text.starts_with("(SWANK::EVAL-AND-GRAB-OUTPUT \"(+ 1 \\\"2\\\")\" :OK"),
            "{text}"
        );
        assert_eq!(read(&text).unwrap(), form);
    }

    #[test]
    fn read_all_reads_sequence() {
        let vs = read_all(" 1 (a) \"s\" ").unwrap();
        assert_eq!(vs.len(), 3);
    }

    #[test]
    fn errors_keep_their_words() {
        let cases = [
            (
                "a b",
                "cannot read Lisp data at byte 2: trailing text after the datum",
            ),
            (
                "",
                "cannot read Lisp data at byte 0: unexpected end of input",
            ),
            (")", "cannot read Lisp data at byte 0: unexpected ')'"),
            ("(a", "cannot read Lisp data at byte 2: unclosed list"),
            (
                "(a . b c)",
                "cannot read Lisp data at byte 8: expected ')' after dotted tail",
            ),
            ("\"ab", "cannot read Lisp data at byte 3: unclosed string"),
            (
                "#(a . b)",
                "cannot read Lisp data at byte 0: dotted list in a vector",
            ),
            (
                "#Px",
                "cannot read Lisp data at byte 3: expected a string after #P",
            ),
            (
                "#!",
                "cannot read Lisp data at byte 0: unsupported reader macro #!",
            ),
            (
                "#",
                "cannot read Lisp data at byte 1: unexpected end of input after #",
            ),
            ("#<a", "cannot read Lisp data at byte 0: unclosed #<"),
            (
                "#\\",
                "cannot read Lisp data at byte 2: unexpected end of input after #\\",
            ),
            (
                "a\\",
                "cannot read Lisp data at byte 2: end of input after \\",
            ),
            ("|a", "cannot read Lisp data at byte 2: unclosed |"),
            (
                "..",
                "cannot read Lisp data at byte 0: a token of dots only",
            ),
            (
                "a:b:c",
                "cannot read Lisp data at byte 0: too many package markers in symbol",
            ),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .map(|(text, words)| (text, words, read(text).unwrap_err().to_string()))
            .filter(|(_, words, got)| got != *words)
            .map(|(text, words, got)| format!("{text:?}: {got:?}, not {words:?}"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }
}
