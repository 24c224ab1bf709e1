//! Per-session state: one MCP session (a stdio connection, an HTTP session, a
//! TCP connection) has its own project root and, by default, its own image;
//! it may start further named images ([`images`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use crate::config::ServerConfig;
use crate::image::Image;
use crate::sync::{MutexExt, RwLockExt};

pub mod handles;
pub mod images;

pub use handles::{ImageHandle, ImageUsage};
pub use images::{ImageChoiceError, NamedImage};

/// State shared by every request of one MCP session.
pub struct Session {
    /// The server-wide configuration (command line and environment).
    pub config: Arc<ServerConfig>,
    root: Arc<RwLock<PathBuf>>,
    root_fixed: bool,
    /// Where `fs-set-project-root` may go: under the root the session
    /// started with and under every root the client declared.
    allowed_roots: RwLock<Vec<PathBuf>>,
    image: ImageSlot,
    /// The images started besides the first (`image-start`), in start
    /// order; they end with the session.
    others: RwLock<Vec<NamedImage>>,
    /// Source directories of the image's ASDF systems: file tools may read
    /// there too. Refreshed from the image (see `tools::lisp_call`).
    read_roots: RwLock<Vec<PathBuf>>,
    /// Unique in this process: names the session inside a (shared) image.
    pub id: u64,
    /// What the owners of per-session state want done when the session ends
    /// (`Session::on_end`), run once by `Session::end`.
    end_hooks: std::sync::Mutex<Vec<EndHook>>,
    /// The key of the first image's handle, minted when first asked for.
    first_key: OnceLock<String>,
    /// Images started by stateless requests so far: their names' numbers.
    stateless_started: std::sync::atomic::AtomicU64,
}

/// Work to do when a session ends: gets the session, returns the work.
pub type EndHook = Box<dyn FnOnce(Arc<Session>) -> futures::future::BoxFuture<'static, ()> + Send>;

/// Where a session's image lives: its own, or the one all sessions share
/// (`--shared-image`). The image is created on first use.
pub enum ImageSlot {
    Own(OnceLock<Image>),
    Shared { image: Arc<OnceLock<Image>> },
}

/// Which image a session uses, among the sessions of this process:
/// sessions sharing one image (`--shared-image`) have the same key. Owners
/// of per-image state (the tools' evaluation queues) key it by this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageKey {
    /// The image of its own of the session with this id.
    Own(u64),
    /// The shared image (its slot's address, stable while a session uses it).
    Shared(usize),
}

impl ImageSlot {
    /// `root`: the project root of the session that starts the image (the
    /// sandbox lets the image write there).
    fn get_or_start(&self, config: &ServerConfig, root: &Arc<RwLock<PathBuf>>) -> Image {
        let cell = match self {
            ImageSlot::Own(c) => c,
            ImageSlot::Shared { image, .. } => image.as_ref(),
        };
        cell.get_or_init(|| {
            let mut image = config.image.clone();
            image.project_root = Some(root.clone());
            Image::new(image)
        })
        .clone()
    }
}

/// Sessions are numbered for the image (each keeps its own current package).
static NEXT_SESSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Session {
    /// A session with an image of its own.
    pub fn new(config: Arc<ServerConfig>) -> Arc<Self> {
        Session::with_image(config, ImageSlot::Own(OnceLock::new()))
    }

    /// A session whose image lives in `image`.
    pub fn with_image(config: Arc<ServerConfig>, image: ImageSlot) -> Arc<Self> {
        let root = config.initial_project_root();
        let explicit = config.project_root.is_some();
        Arc::new(Session {
            config,
            allowed_roots: RwLock::new(vec![root.clone()]),
            root: Arc::new(RwLock::new(root)),
            root_fixed: explicit,
            image,
            others: RwLock::new(Vec::new()),
            read_roots: RwLock::new(Vec::new()),
            id: NEXT_SESSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            end_hooks: Default::default(),
            first_key: OnceLock::new(),
            stateless_started: Default::default(),
        })
    }

    /// Registers work for when the session ends (its owner's per-session
    /// state: suspended debuggers, traces; see `tools::attach_session`).
    /// Hooks run in the order they were registered.
    pub fn on_end(&self, hook: EndHook) {
        self.end_hooks.guard().push(hook);
    }

    /// Ends the session: runs every hook once (the transports call this when
    /// the client is gone: stdin's end, a TCP close, an HTTP `DELETE` or
    /// expiry). A second call finds nothing left to run.
    pub async fn end(self: &Arc<Self>) {
        let hooks = std::mem::take(&mut *self.end_hooks.guard());
        for hook in hooks {
            hook(self.clone()).await;
        }
        let others = std::mem::take(&mut *self.others.writing());
        for o in others {
            o.image.shutdown().await;
        }
    }

    /// The session's Lisp image (from `config.image`): created on first use
    /// and started in the background; calls wait for it. Must be called
    /// inside the Tokio runtime. Dropping the session stops a local image.
    pub fn image(&self) -> Image {
        self.image.get_or_start(&self.config, &self.root)
    }

    /// The name tools address the first image by: its implementation's
    /// (`sbcl` by default, or what `--lisp` names), `attached` for `--swank`.
    pub fn first_image_name(&self) -> String {
        let config = &self.config.image;
        if config.attach.is_some() {
            return "attached".into();
        }
        match &config.lisp {
            None => "sbcl".into(),
            Some(lisp) => images::default_name(&lisp.to_string_lossy(), self.first_image_kind()),
        }
    }

    /// The first image's implementation, where the configuration names it
    /// (`sbcl` by default; `None` when attached, or for a `--lisp` path
    /// whose name does not say it).
    pub fn first_image_kind(&self) -> Option<crate::image::implementation::LispKind> {
        let config = &self.config.image;
        match (&config.attach, &config.lisp) {
            (Some(_), _) => None,
            (None, None) => Some(crate::image::implementation::LispKind::Sbcl),
            (None, Some(lisp)) => images::kind_named(lisp),
        }
    }

    /// The image named `name`: `None` for the first image (whose handle
    /// [`Session::image`] gives, starting it on first use), the handle of
    /// a further one.
    pub fn image_named(&self, name: &str) -> Result<Option<NamedImage>, ImageChoiceError> {
        if name == self.first_image_name() {
            return Ok(None);
        }
        let others = self.others.reading();
        match others.iter().find(|o| o.name == name) {
            Some(o) => Ok(Some(o.clone())),
            None => Err(ImageChoiceError::Unknown {
                name: name.to_string(),
                known: std::iter::once(self.first_image_name())
                    .chain(others.iter().map(|o| o.name.clone()))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The handle of image `name` with key `key` on this node.
    pub fn handle_of(&self, name: &str, key: &str) -> String {
        ImageHandle {
            node: self.config.node_id.clone(),
            name: name.to_string(),
            key: key.to_string(),
        }
        .to_string()
    }

    /// The handle of the session's first image (its key minted on first
    /// request). In the stateless era every stateless request without
    /// `image` shares this image, as they share the session.
    pub fn first_image_handle(&self) -> Result<String, ImageChoiceError> {
        let key = match self.first_key.get() {
            Some(k) => k.clone(),
            None => {
                let fresh = handles::new_key().map_err(ImageChoiceError::NoKey)?;
                self.first_key.get_or_init(|| fresh).clone()
            }
        };
        Ok(self.handle_of(&self.first_image_name(), &key))
    }

    /// The image a call's `image` argument names: `None` for the first
    /// image, a further one's handle otherwise. `given` is a handle
    /// (`NODE/NAME~KEY`) or, in a legacy session, a name. `stateless`: the
    /// call is a stateless request (names of further images are refused:
    /// only their handles carry the key). `nodes_down`: the nodes the proxy
    /// said are down (a handle of theirs is an image lost, not a misroute).
    /// A further image found gone (it died, or was stopped) is taken out
    /// of the session and said lost.
    pub fn resolve_image(
        &self,
        given: &str,
        stateless: bool,
        nodes_down: &[String],
    ) -> Result<Option<NamedImage>, ImageChoiceError> {
        let Some(handle) = ImageHandle::parse(given) else {
            if given.contains('/') || given.contains('~') {
                return Err(ImageChoiceError::BadHandle(given.to_string()));
            }
            if stateless && given != self.first_image_name() {
                return Err(ImageChoiceError::NeedsHandle(given.to_string()));
            }
            return self.image_named(given);
        };
        if handle.node != self.config.node_id {
            if nodes_down.contains(&handle.node) {
                return Err(ImageChoiceError::NodeDown {
                    handle: given.to_string(),
                    node: handle.node,
                });
            }
            return Err(ImageChoiceError::OtherNode {
                handle: given.to_string(),
                node: handle.node,
                here: self.config.node_id.clone(),
            });
        }
        let lost = || ImageChoiceError::Lost(given.to_string());
        if handle.name == self.first_image_name() {
            return match self.first_key.get() {
                Some(k) if handle.key_is(k) => Ok(None),
                _ => Err(lost()),
            };
        }
        let found = self
            .others
            .reading()
            .iter()
            .find(|o| o.name == handle.name && handle.key_is(&o.key))
            .cloned()
            .ok_or_else(lost)?;
        if found.usage.gone_since_seen(found.image.info().generation) {
            if let Ok(gone) = self.remove_image(&found.name) {
                tokio::spawn(async move { gone.image.shutdown().await });
            }
            return Err(lost());
        }
        Ok(Some(found))
    }

    /// The images started besides the first, in start order.
    pub fn other_images(&self) -> Vec<NamedImage> {
        self.others.reading().clone()
    }

    /// Starts (in the background) a further image of `lisp` (an
    /// implementation's name or a path) named `name` (default: the
    /// implementation's name). It is configured as the first image is
    /// (cache, sandbox, limits, the project root), always local.
    ///
    /// `stateless`: started by a stateless request, which has no session
    /// of its own, so the name gets a number (`sbcl-3`) that no other
    /// client's image has; the handle is how the client addresses it.
    pub fn start_image(
        &self,
        name: Option<&str>,
        lisp: &str,
        stateless: bool,
    ) -> Result<NamedImage, ImageChoiceError> {
        if self.config.image.attach.is_some() {
            return Err(ImageChoiceError::Attached);
        }
        let (path, kind) = images::resolve_lisp(lisp, &self.config.image)?;
        let mut name = match name {
            Some(n) => n.to_string(),
            None => images::default_name(lisp, kind),
        };
        if !images::valid_name(&name) {
            return Err(ImageChoiceError::BadName(name));
        }
        if stateless {
            let n = 1 + self
                .stateless_started
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let suffix = format!("-{n}");
            name.truncate(40 - suffix.len());
            name.push_str(&suffix);
        }
        let key = handles::new_key().map_err(ImageChoiceError::NoKey)?;
        let mut others = self.others.writing();
        if name == self.first_image_name() || others.iter().any(|o| o.name == name) {
            return Err(ImageChoiceError::Taken(name));
        }
        let mut config = self.config.image.clone();
        config.lisp = Some(path);
        config.project_root = Some(self.root.clone());
        let started = NamedImage {
            name,
            kind,
            lisp: lisp.to_string(),
            image: Image::new(config),
            key,
            usage: Default::default(),
        };
        others.push(started.clone());
        Ok(started)
    }

    /// Takes a further image out of the session (the caller shuts it
    /// down); the first image cannot be.
    pub fn remove_image(&self, name: &str) -> Result<NamedImage, ImageChoiceError> {
        match self.image_named(name)? {
            None => Err(ImageChoiceError::First(name.to_string())),
            Some(_) => {
                let mut others = self.others.writing();
                let at = others.iter().position(|o| o.name == name);
                at.map(|i| others.remove(i))
                    .ok_or_else(|| ImageChoiceError::Unknown {
                        name: name.to_string(),
                        known: String::new(),
                    })
            }
        }
    }

    /// Which image the session uses (see [`ImageKey`]); never starts one.
    pub fn image_key(&self) -> ImageKey {
        match &self.image {
            ImageSlot::Own(_) => ImageKey::Own(self.id),
            ImageSlot::Shared { image } => ImageKey::Shared(Arc::as_ptr(image) as usize),
        }
    }

    /// The session's image if it was created already (never starts one).
    pub fn image_if_started(&self) -> Option<Image> {
        match &self.image {
            ImageSlot::Own(c) => c.get().cloned(),
            ImageSlot::Shared { image, .. } => image.get().cloned(),
        }
    }

    /// True when the session offers tools that need a Lisp image.
    fn needs_image(&self) -> bool {
        use crate::config::ToolGroup;
        self.config.tool_groups.iter().any(|g| {
            matches!(
                g,
                ToolGroup::Eval
                    | ToolGroup::Image
                    | ToolGroup::Code
                    | ToolGroup::Asdf
                    | ToolGroup::Debug
            )
        })
    }

    /// Starts the image in the background now (when the session offers tools
    /// that need one), so the first evaluation does not wait for it.
    pub fn warm_up(&self) {
        if self.needs_image() && self.config.eager_image {
            let _ = self.image();
        }
    }

    /// The image's lifecycle notes from now on, when the session has an
    /// image (asking never starts one for a session without image tools).
    pub fn image_notes(&self) -> Option<tokio::sync::broadcast::Receiver<crate::image::ImageNote>> {
        self.needs_image().then(|| self.image().notes())
    }

    /// Directories besides the project root that file tools may read.
    pub fn read_roots(&self) -> Vec<PathBuf> {
        self.read_roots.reading().clone()
    }

    /// Replaces the extra read roots (canonical directories; `/` is never
    /// accepted as one).
    pub fn set_read_roots(&self, roots: Vec<PathBuf>) {
        let mut roots: Vec<PathBuf> = roots
            .into_iter()
            .filter_map(|r| r.canonicalize().ok())
            .filter(|r| r.is_dir() && r.parent().is_some())
            .collect();
        roots.sort();
        roots.dedup();
        *self.read_roots.writing() = roots;
    }

    /// The project root: file tools resolve paths against it and refuse to
    /// leave it. Always an absolute, canonical path.
    pub fn project_root(&self) -> PathBuf {
        self.root.reading().clone()
    }

    /// Sets the project root (`fs-set-project-root`).
    pub fn set_project_root(&self, root: &Path) {
        *self.root.writing() = root.to_path_buf();
    }

    /// True when the user fixed the root on the command line (client roots
    /// are then ignored).
    pub fn root_is_fixed(&self) -> bool {
        self.root_fixed
    }

    /// Adopts the root a client announces (`initialize`'s `rootUri`/`rootPath`,
    /// roots), unless the user fixed one on the command line.
    /// A root the client declares always widens where `fs-set-project-root`
    /// may go.
    pub fn adopt_client_root(&self, root: &Path) {
        let Ok(canon) = root.canonicalize() else {
            return;
        };
        if !canon.is_dir() {
            return;
        }
        self.allow_root(&canon);
        if !self.root_fixed {
            self.set_project_root(&canon);
        }
    }

    /// Records a root the client declared (without adopting it).
    pub fn allow_root(&self, canon: &Path) {
        let mut allowed = self.allowed_roots.writing();
        if !allowed.iter().any(|a| a == canon) {
            allowed.push(canon.to_path_buf());
        }
    }

    /// The directories `fs-set-project-root` may move under (unless the
    /// server runs with `--allow-any-root`).
    pub fn allowed_roots(&self) -> Vec<PathBuf> {
        self.allowed_roots.reading().clone()
    }
}
