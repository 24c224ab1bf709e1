//! Directory walks that no file can stall: `.gitignore`/`.ignore` rules
//! honoured, but the ignore files read by us, through the allowed root's
//! directory handle, non-blocking and regular files only.
//!
//! The `ignore` crate walks in parallel and matches gitignore patterns well,
//! but opens each directory's ignore files with a plain blocking `open`: a
//! named pipe called `.gitignore` would hold the walk forever. So its own
//! ignore-file reading is switched off ([`builder`]) and [`Rules::keep`],
//! used as the walk's entry filter, applies the same rules from files read
//! with [`open_regular_in`]. As in the crate, the deepest directory with a
//! matching rule decides, and `.ignore` rules win over `.gitignore` ones;
//! ignore files in the directories above the walk are read up to the
//! allowed root (not above it). Git's `info/exclude` and the global
//! excludes file are not read.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use super::fs_paths::{open_regular_in, rel_under};
use crate::sync::MutexExt;

/// Largest ignore file read (bigger ones are left out).
const MAX_IGNORE_FILE: u64 = 1024 * 1024;

/// A walk builder for `path` with hidden entries skipped and the crate's
/// own ignore-file reading off; add `filter_entry` with [`Rules::keep`].
pub fn builder(path: &Path) -> ignore::WalkBuilder {
    let mut b = ignore::WalkBuilder::new(path);
    b.standard_filters(false).hidden(true).follow_links(false);
    b
}

/// The ignore rules of the directories under one allowed root, read on
/// demand and cached for one walk.
pub struct Rules {
    dir: Dir,
    base: PathBuf,
    levels: Mutex<HashMap<PathBuf, Arc<Level>>>,
}

/// One directory's rules.
struct Level {
    ignore: Gitignore,
    git: Gitignore,
}

impl Rules {
    /// Rules for walks under `base` (an allowed root), read through `dir`,
    /// a handle on it.
    pub fn new(dir: Dir, base: &Path) -> Rules {
        Rules {
            dir,
            base: base.to_path_buf(),
            levels: Mutex::new(HashMap::new()),
        }
    }

    /// The handle on the allowed root.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Whether the walk should yield (and, for a directory, enter) `path`.
    pub fn keep(&self, path: &Path, is_dir: bool) -> bool {
        let mut decided_ignore = Match::None;
        let mut decided_git = Match::None;
        for d in path.ancestors().skip(1) {
            if !d.starts_with(&self.base) {
                break;
            }
            let level = self.level(d);
            if decided_ignore.is_none() {
                decided_ignore = to_unit(level.ignore.matched(path, is_dir));
            }
            if decided_git.is_none() {
                decided_git = to_unit(level.git.matched(path, is_dir));
            }
            if !decided_ignore.is_none() {
                break;
            }
        }
        let decided = if decided_ignore.is_none() {
            decided_git
        } else {
            decided_ignore
        };
        !decided.is_ignore()
    }

    fn level(&self, d: &Path) -> Arc<Level> {
        if let Some(l) = self.levels.guard().get(d) {
            return l.clone();
        }
        let level = Arc::new(Level {
            ignore: self.read_rules(d, ".ignore"),
            git: self.read_rules(d, ".gitignore"),
        });
        self.levels.guard().insert(d.to_path_buf(), level.clone());
        level
    }

    /// The rules in `d/name`; none when it is missing, not a regular file
    /// (a FIFO is not waited on), too big, or not beneath the root.
    fn read_rules(&self, d: &Path, name: &str) -> Gitignore {
        let mut b = GitignoreBuilder::new(d);
        let file = d.join(name);
        if let Ok((f, meta)) = open_regular_in(&self.dir, &rel_under(&self.base, &file), name) {
            if meta.len() <= MAX_IGNORE_FILE {
                use std::io::Read;
                for (i, line) in BufReader::new(f.take(MAX_IGNORE_FILE)).lines().enumerate() {
                    let Ok(line) = line else { break };
                    let line = if i == 0 {
                        line.trim_start_matches('\u{feff}').to_string()
                    } else {
                        line
                    };
                    // A bad pattern is skipped, as git does.
                    let _ = b.add_line(Some(file.clone()), &line);
                }
            }
        }
        b.build()
            .unwrap_or_else(|_| GitignoreBuilder::new(d).build().expect("empty rules"))
    }
}

/// A match without its glob, to keep in a variable.
fn to_unit<T>(m: Match<T>) -> Match<()> {
    match m {
        Match::None => Match::None,
        Match::Ignore(_) => Match::Ignore(()),
        Match::Whitelist(_) => Match::Whitelist(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_follow_gitignore_precedence() {
        let t = tempfile_dir("rules");
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::write(t.join(".gitignore"), "*.tmp\nbuild/\n").unwrap();
        std::fs::write(t.join("a/.gitignore"), "!keep.tmp\n").unwrap();
        std::fs::write(t.join("a/b/.ignore"), "x.lisp\n").unwrap();
        let dir = Dir::open_ambient_dir(&t, cap_std::ambient_authority()).unwrap();
        let r = Rules::new(dir, &t);
        assert!(!r.keep(&t.join("a/junk.tmp"), false));
        assert!(r.keep(&t.join("a/keep.tmp"), false));
        assert!(!r.keep(&t.join("build"), true));
        assert!(
            r.keep(&t.join("build"), false),
            "build/ matches directories only"
        );
        assert!(!r.keep(&t.join("a/b/x.lisp"), false));
        assert!(r.keep(&t.join("a/b/y.lisp"), false));
        std::fs::remove_dir_all(&t).unwrap();
    }

    fn tempfile_dir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("safe-walk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
