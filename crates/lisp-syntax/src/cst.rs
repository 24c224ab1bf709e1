//! Lossless concrete syntax tree of Common Lisp source.
