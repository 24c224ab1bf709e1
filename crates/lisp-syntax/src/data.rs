//! Lisp data as values: the printed forms Swank sends back.
