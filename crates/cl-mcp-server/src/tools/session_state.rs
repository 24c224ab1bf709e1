//! What the tools keep for each session, outside `Session` (which knows no
//! tool types): the evaluation bookkeeping ([`EvalState`], one per image of
//! the session), the pending
//! debuggers ([`Debuggers`]) and the last profiles' flame graphs
//! ([`FlameGraphs`]). [`attach_session`] creates it once per
//! session and registers its end (`Session::on_end`): the pending
//! debuggers are aborted and the session's traces undone in a shared
//! image (`debug::end_session`).
//!
//! The image's queues ([`ImageTurns`]) belong to the image: sessions
//! sharing one image (`--shared-image`) share them, found by the image's
//! [`ImageKey`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::debug::{self, Debuggers};
use super::flame_graph::FlameGraphs;
use super::turn::EvalTurn;
use crate::session::{ImageKey, Session};
use crate::sync::MutexExt;

/// What the tools keep for one session.
pub struct SessionTools {
    /// Evaluation bookkeeping of the session's first image.
    pub eval: Arc<EvalState>,
    /// Evaluation bookkeeping of each further image (`image-start`), by
    /// name; forgotten when the image stops.
    others: Mutex<HashMap<String, Arc<EvalState>>>,
    /// Evaluations suspended in the debugger (`evaluate-lisp` with
    /// `debug: true`); aborted when the session ends.
    pub debuggers: Debuggers,
    /// The flame graphs of the session's last profiles (`profile-code`),
    /// read as `lisp://profile/...` resources.
    pub flame_graphs: FlameGraphs,
    /// The image's queues, held as long as a session uses them.
    _turns: Arc<ImageTurns>,
}

/// A session's evaluation bookkeeping (see `tools::lisp_call`).
pub struct EvalState {
    /// Held while an evaluation runs; waiting evaluations run in arrival
    /// order. Sessions sharing one image share the turn (one queue per
    /// image); the time a call waits in it counts against its timeout.
    pub turn: Arc<EvalTurn>,
    /// Held while a build (compile, load, test) runs in the image; the
    /// time a build waits in it counts against its timeout too.
    pub build_turn: Arc<EvalTurn>,
    /// The id of the evaluation running now, if any.
    pub running: Mutex<Option<u64>>,
    /// The image's one-time "state was lost" notice, until a result shows it.
    pub notice: Mutex<Option<String>>,
    /// What the image was last told of the project's systems, so the
    /// registration is repeated only after a restart, a crash, a root
    /// change or a change under the root.
    pub project_registered: Mutex<Option<ProjectRegistration>>,
}

/// The project systems one image generation was told of.
pub struct ProjectRegistration {
    pub generation: u64,
    pub root: PathBuf,
    /// The walk whose `.asd` files the image finds first.
    pub walk: std::sync::Arc<super::project_systems::AsdWalk>,
    /// When the walk was last found current (`None`: a file tool wrote
    /// under the root since, check before the next call).
    pub checked: Option<std::time::Instant>,
    /// The walk of this root stopped at its limit, and a result said so.
    pub said_stopped: bool,
}

/// What calls into one image queue on: evaluations in arrival order, and
/// builds (compiling, ASDF: not thread-safe) one at a time, in arrival
/// order too.
pub struct ImageTurns {
    pub eval: Arc<EvalTurn>,
    pub build: Arc<EvalTurn>,
}

impl SessionTools {
    /// The evaluation bookkeeping of the image `name` (`None`: the first);
    /// a further image gets its own queues on first use.
    pub fn eval_of(&self, name: Option<&str>) -> Arc<EvalState> {
        let Some(name) = name else {
            return self.eval.clone();
        };
        self.others
            .guard()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(EvalState::new(&ImageTurns::default())))
            .clone()
    }

    /// Forgets a stopped image's bookkeeping (an image started later under
    /// its name starts afresh).
    pub fn forget_image(&self, name: &str) {
        self.others.guard().remove(name);
    }
}

impl EvalState {
    fn new(turns: &ImageTurns) -> Self {
        EvalState {
            turn: turns.eval.clone(),
            build_turn: turns.build.clone(),
            running: Default::default(),
            notice: Default::default(),
            project_registered: Default::default(),
        }
    }
}

impl Default for ImageTurns {
    fn default() -> Self {
        ImageTurns {
            eval: Default::default(),
            build: Arc::new(EvalTurn::for_builds()),
        }
    }
}

/// The tools' state of each live session, by `Session::id`. The session's
/// end hook holds the state; this map only finds it.
static SESSIONS: LazyLock<Mutex<HashMap<u64, Weak<SessionTools>>>> =
    LazyLock::new(Default::default);

/// The queues of each shared image, held by the sessions using it.
static SHARED_TURNS: LazyLock<Mutex<HashMap<usize, Weak<ImageTurns>>>> =
    LazyLock::new(Default::default);

/// The queues of the image `key` names: a new pair for an image of its
/// own, the pair its other sessions use for a shared one.
fn turns_of(key: ImageKey) -> Arc<ImageTurns> {
    let ImageKey::Shared(shared) = key else {
        return Arc::new(ImageTurns::default());
    };
    let mut all = SHARED_TURNS.guard();
    if let Some(t) = all.get(&shared).and_then(Weak::upgrade) {
        return t;
    }
    all.retain(|_, t| t.strong_count() > 0);
    let t = Arc::new(ImageTurns::default());
    all.insert(shared, Arc::downgrade(&t));
    t
}

/// The tools' state of `session`, created (and its end registered with
/// the session) on first use. The engine calls it once for each session it
/// opens; a tool call finds the same state.
pub fn attach_session(session: &Session) -> Arc<SessionTools> {
    let mut all = SESSIONS.guard();
    if let Some(s) = all.get(&session.id).and_then(Weak::upgrade) {
        return s;
    }
    all.retain(|_, s| s.strong_count() > 0);
    let turns = turns_of(session.image_key());
    let state = Arc::new(SessionTools {
        eval: Arc::new(EvalState::new(&turns)),
        others: Default::default(),
        debuggers: Default::default(),
        flame_graphs: Default::default(),
        _turns: turns,
    });
    all.insert(session.id, Arc::downgrade(&state));
    drop(all);
    // The hook keeps the state alive as long as the session, and ends it
    // with the session.
    let held = state.clone();
    session.on_end(Box::new(move |s| {
        Box::pin(async move { debug::end_session(&s, &held).await })
    }));
    state
}
