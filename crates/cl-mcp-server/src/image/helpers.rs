//! The Lisp helper sources (owned by the helpers' authors, in
//! `crates/cl-mcp-server/lisp/`), embedded in the binary.
//!
//! This is the one place that embeds them. The load order is the `ORDER`
//! file of that directory; every file it names must be listed in
//! [`EMBEDDED`] (a unit test checks both directions, so adding a helper file
//! without listing it here fails the build's tests, not a user's session).

/// Every helper file, by its name in `lisp/`.
const EMBEDDED: &[(&str, &str)] = &[
    ("package.lisp", include_str!("../../lisp/package.lisp")),
    ("impl-sbcl.lisp", include_str!("../../lisp/impl-sbcl.lisp")),
    ("impl-ecl.lisp", include_str!("../../lisp/impl-ecl.lisp")),
    (
        "impl-clisp.lisp",
        include_str!("../../lisp/impl-clisp.lisp"),
    ),
    ("impl-abcl.lisp", include_str!("../../lisp/impl-abcl.lisp")),
    ("util.lisp", include_str!("../../lisp/util.lisp")),
    ("names.lisp", include_str!("../../lisp/names.lisp")),
    ("capture.lisp", include_str!("../../lisp/capture.lisp")),
    ("eval.lisp", include_str!("../../lisp/eval.lisp")),
    ("debug.lisp", include_str!("../../lisp/debug.lisp")),
    (
        "introspect.lisp",
        include_str!("../../lisp/introspect.lisp"),
    ),
    ("project.lisp", include_str!("../../lisp/project.lisp")),
    (
        "frameworks.lisp",
        include_str!("../../lisp/frameworks.lisp"),
    ),
    ("build.lisp", include_str!("../../lisp/build.lisp")),
    (
        "quicklisp-stand-in.lisp",
        include_str!("../../lisp/quicklisp-stand-in.lisp"),
    ),
    ("systems.lisp", include_str!("../../lisp/systems.lisp")),
    ("test-run.lisp", include_str!("../../lisp/test-run.lisp")),
    (
        "loose-files.lisp",
        include_str!("../../lisp/loose-files.lisp"),
    ),
    ("coverage.lisp", include_str!("../../lisp/coverage.lisp")),
    ("inspector.lisp", include_str!("../../lisp/inspector.lisp")),
    ("trace.lisp", include_str!("../../lisp/trace.lisp")),
    ("profiler.lisp", include_str!("../../lisp/profiler.lisp")),
    ("threads.lisp", include_str!("../../lisp/threads.lisp")),
    ("direct.lisp", include_str!("../../lisp/direct.lisp")),
];

const ORDER: &str = include_str!("../../lisp/ORDER");

/// The supervisor's own boot code (starts Swank with the per-image secret).
pub const BOOT: (&str, &str) = ("boot.lisp", include_str!("boot.lisp"));

/// What every start and cache build loads first, before Swank: the boot
/// guard (an unhandled error prints and exits), UTF-8 defaults, Swank's
/// fasls written atomically into the server's cache, the cache check.
pub const PRELUDE: (&str, &str) = ("prelude.lisp", include_str!("prelude.lisp"));

fn order() -> impl Iterator<Item = &'static str> {
    ORDER
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The helper sources as `(file name, text)`, in load order.
pub fn sources() -> Vec<(&'static str, &'static str)> {
    order()
        .filter_map(|name| {
            let found = EMBEDDED.iter().find(|(n, _)| *n == name).copied();
            if found.is_none() {
                tracing::error!(file = name, "helper named in lisp/ORDER is not embedded");
            }
            found
        })
        .collect()
}

/// A stable 64-bit FNV-1a hash (std's hasher may change between Rust
/// releases; cache keys should not).
pub(crate) fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Hash of the helper sources and the boot code: part of the core cache key
/// and the marker that tells an attached image has the current helpers.
pub fn sources_hash() -> String {
    let mut h = 0u64;
    for (name, text) in sources().into_iter().chain([PRELUDE, BOOT]) {
        h = fnv1a(h, name.as_bytes());
        h = fnv1a(h, text.as_bytes());
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_embedded_list_agree() {
        let ordered: Vec<&str> = order().collect();
        for name in &ordered {
            assert!(
                EMBEDDED.iter().any(|(n, _)| n == name),
                "lisp/ORDER names {name} but src/image/helpers.rs does not embed it"
            );
        }
        for (name, _) in EMBEDDED {
            assert!(
                ordered.contains(name),
                "{name} is embedded but not in lisp/ORDER"
            );
        }
        // And the directory holds no helper that neither lists.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lisp");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".lisp") {
                assert!(
                    ordered.contains(&name.as_str()),
                    "lisp/{name} is not in lisp/ORDER"
                );
            }
        }
        assert_eq!(sources().len(), ordered.len());
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        assert_eq!(sources_hash(), sources_hash());
        assert_ne!(fnv1a(0, b"a"), fnv1a(0, b"b"));
    }
}
