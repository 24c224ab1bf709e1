//! Flame graphs of `profile-code`'s sampled stacks. The image sends the
//! stacks folded (`ROOT;...;LEAF COUNT` lines, `lisp/profiler.lisp`);
//! `inferno` draws them as an SVG, and `resvg` renders a narrower drawing
//! of the same stacks as a PNG a client shows at once. A session keeps its
//! last [`KEPT`] flame graphs ([`FlameGraphs`], in the session's tool
//! state), offered as the resources `lisp://profile/<id>/flamegraph.svg`
//! and `.../flamegraph.png` (read in `resources/flame_graphs.rs`). An id is
//! 96 random bits (a handle key's), not a count: the link in the result is
//! what reads the graph, and a client sharing the session (stateless HTTP)
//! cannot guess another's.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use inferno::flamegraph::{self, Options};
use resvg::{tiny_skia, usvg};
use serde_json::{json, Value};

use crate::sync::MutexExt;

/// Flame graphs a session keeps (the oldest goes first).
pub const KEPT: usize = 8;
/// Width of the SVG resource, in pixels (inferno's usual width).
const SVG_WIDTH: usize = 1200;
/// Width of the PNG shown in the result: small, with text at its natural
/// size (drawn at this width, not scaled down from the SVG).
pub const PNG_WIDTH: u32 = 800;
/// Tallest PNG: a deep recursion is scaled down to fit.
const PNG_MAX_HEIGHT: u32 = 1600;
/// The font the PNG's drawing asks for first (inferno quotes `font_type`
/// as one family name): Debian's `fonts-dejavu-core`.
const PNG_FONT: &str = "DejaVu Sans";

/// Why a flame graph could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum FlameGraphError {
    #[error("no sampled stacks of the profiled code to draw")]
    NoStacks,
    #[error("inferno could not draw the flame graph: {0}")]
    Draw(#[from] std::io::Error),
    #[error("the flame graph's SVG did not parse for rendering: {0}")]
    Parse(#[from] usvg::Error),
    #[error(
        "no font to render the flame graph's text: install one (Debian: fonts-dejavu-core), \
         or pass flameGraph: false"
    )]
    NoFont,
    #[error("no random id for the flame graph (/dev/urandom): {0}")]
    Id(std::io::Error),
    #[error("the flame graph's PNG could not be made: {0}")]
    Png(String),
}

/// One drawn flame graph.
pub struct FlameGraph {
    /// The interactive SVG (search, zoom in a browser).
    pub svg: String,
    /// The static rendering, [`PNG_WIDTH`] wide.
    pub png: Vec<u8>,
    pub png_width: u32,
    pub png_height: u32,
}

/// A session's flame graphs, by id (random: see the module's comment).
#[derive(Default)]
pub struct FlameGraphs {
    kept: Mutex<VecDeque<(String, Arc<FlameGraph>)>>,
}

impl FlameGraphs {
    /// Keeps `graph`, dropping the oldest past [`KEPT`]; returns its id
    /// (an error when `/dev/urandom` cannot be read).
    pub fn keep(&self, graph: FlameGraph) -> std::io::Result<(String, Arc<FlameGraph>)> {
        let id = crate::session::handles::new_key()?;
        let graph = Arc::new(graph);
        let mut kept = self.kept.guard();
        kept.push_back((id.clone(), graph.clone()));
        while kept.len() > KEPT {
            kept.pop_front();
        }
        Ok((id, graph))
    }

    pub fn get(&self, id: &str) -> Option<Arc<FlameGraph>> {
        self.kept
            .guard()
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, g)| g.clone())
    }
}

/// The SVG resource's URI.
pub fn svg_uri(id: &str) -> String {
    format!("lisp://profile/{id}/flamegraph.svg")
}

/// The PNG resource's URI.
pub fn png_uri(id: &str) -> String {
    format!("lisp://profile/{id}/flamegraph.png")
}

/// Draws `stacks` (folded lines) as an SVG and a PNG under `title` and
/// `subtitle`. CPU-bound: call it off the async workers.
pub fn draw(stacks: &[String], title: &str, subtitle: &str) -> Result<FlameGraph, FlameGraphError> {
    if stacks.is_empty() {
        return Err(FlameGraphError::NoStacks);
    }
    let svg = draw_svg(stacks, title, subtitle, SVG_WIDTH, None)?;
    let (_, font) = fonts().ok_or(FlameGraphError::NoFont)?;
    let small = draw_svg(stacks, title, subtitle, PNG_WIDTH as usize, Some(font))?;
    let (png, png_width, png_height) = render_png(&small)?;
    Ok(FlameGraph {
        svg,
        png,
        png_width,
        png_height,
    })
}

fn draw_svg(
    stacks: &[String],
    title: &str,
    subtitle: &str,
    width: usize,
    png_font: Option<&str>,
) -> Result<String, FlameGraphError> {
    let mut options = Options::default();
    options.title = title.into();
    options.subtitle = Some(subtitle.to_string());
    options.image_width = Some(width);
    // The PNG's drawing: no script (nothing runs it), the font installed.
    if let Some(font) = png_font {
        options.font_type = font.into();
        options.no_javascript = true;
    }
    options.count_name = "samples".into();
    // The same stacks give the same colours in both drawings and in every run.
    options.hash = true;
    options.deterministic = true;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut options, stacks.iter().map(String::as_str), &mut out)?;
    let svg = String::from_utf8_lossy(&out).into_owned();
    Ok(match png_font {
        Some(_) => for_a_picture(svg),
        None => svg,
    })
}

/// The drawing for the PNG, where nothing can be clicked: without the
/// search button's label, and with the root frame labelled (inferno leaves
/// its text empty; its tooltip says "all").
fn for_a_picture(mut svg: String) -> String {
    if let Some(start) = svg.find("<text id=\"search\"") {
        if let Some(len) = svg[start..].find("</text>") {
            svg.replace_range(start..start + len + "</text>".len(), "");
        }
    }
    if let Some(root) = svg.find("<title>all (") {
        if let Some(empty) = svg[root..].find("></text>") {
            let at = root + empty + 1;
            let closes_root = !svg[root..at].contains("</g>");
            if closes_root {
                svg.insert_str(at, "all");
            }
        }
    }
    svg
}

/// The system's fonts, loaded once, and the family the PNG's drawing uses
/// ([`PNG_FONT`] if installed, else the first found); `None` when there
/// is no font.
fn fonts() -> Option<&'static (Arc<usvg::fontdb::Database>, String)> {
    static FONTS: OnceLock<Option<(Arc<usvg::fontdb::Database>, String)>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_system_fonts();
            let families: Vec<String> = db
                .faces()
                .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
                .collect();
            let family = families
                .iter()
                .find(|f| f.as_str() == PNG_FONT)
                .or_else(|| families.first())?
                .clone();
            db.set_sans_serif_family(family.clone());
            Some((Arc::new(db), family))
        })
        .as_ref()
}

fn render_png(svg: &str) -> Result<(Vec<u8>, u32, u32), FlameGraphError> {
    let (fontdb, family) = fonts().ok_or(FlameGraphError::NoFont)?;
    let options = usvg::Options {
        fontdb: fontdb.clone(),
        font_family: family.clone(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options)?;
    let size = tree.size();
    let scale = (PNG_MAX_HEIGHT as f32 / size.height()).min(1.0);
    let width = (size.width() * scale).ceil() as u32;
    let height = (size.height() * scale).ceil() as u32;
    let mut pixmap = tiny_skia::Pixmap::new(width, height)
        .ok_or_else(|| FlameGraphError::Png(format!("no {width}x{height} canvas")))?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    let png = pixmap
        .encode_png()
        .map_err(|e| FlameGraphError::Png(e.to_string()))?;
    Ok((png, width, height))
}

/// `bytes` in base64, as content blocks and blobs carry them.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The PNG as an MCP `image` content block.
pub fn image_block(graph: &FlameGraph) -> Value {
    json!({
        "type": "image",
        "data": base64(&graph.png),
        "mimeType": "image/png",
    })
}

/// The link to the SVG resource, as an MCP `resource_link` content block.
pub fn link_block(id: &str, graph: &FlameGraph) -> Value {
    json!({
        "type": "resource_link",
        "uri": svg_uri(id),
        "name": format!("flamegraph-{id}.svg"),
        "title": "Flame graph (SVG)",
        "description": "The profile's sampled stacks as an interactive flame graph \
                        (click to zoom, search; open in a browser)",
        "mimeType": "image/svg+xml",
        "size": graph.svg.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_and_a_png_of_the_stated_width() {
        let stacks = vec!["MAIN;HOT 90".to_string(), "MAIN;COLD 10".to_string()];
        let g = draw(&stacks, "test", "samples").unwrap();
        assert!(g.svg.contains("HOT") && g.svg.contains("COLD"));
        assert_eq!(g.png_width, PNG_WIDTH);
        assert!(g.png.starts_with(b"\x89PNG"));
    }

    #[test]
    fn the_picture_has_no_search_button_and_names_its_root() {
        let stacks = vec!["MAIN;HOT 90".to_string(), "MAIN;COLD 10".to_string()];
        let svg = draw_svg(&stacks, "t", "s", PNG_WIDTH as usize, Some("DejaVu Sans")).unwrap();
        assert!(!svg.contains(">Search<"), "{svg}");
        assert!(svg.contains(">all</text>"), "{svg}");
        // The browser's drawing keeps both as inferno made them.
        let svg = draw_svg(&stacks, "t", "s", SVG_WIDTH, None).unwrap();
        assert!(svg.contains(">Search<") && !svg.contains(">all</text>"));
    }

    #[test]
    fn a_session_keeps_its_last_graphs() {
        let graphs = FlameGraphs::default();
        let ids: Vec<String> = (0..KEPT + 2)
            .map(|_| {
                graphs
                    .keep(FlameGraph {
                        svg: String::new(),
                        png: Vec::new(),
                        png_width: 0,
                        png_height: 0,
                    })
                    .unwrap()
                    .0
            })
            .collect();
        assert!(graphs.get(&ids[0]).is_none());
        assert!(graphs.get(&ids[1]).is_none());
        assert!(graphs.get(&ids[2]).is_some());
        assert!(graphs.get(ids.last().unwrap()).is_some());
        // Random, 96 bits in hex, all different.
        assert!(ids
            .iter()
            .all(|id| id.len() == 24 && id.chars().all(|c| c.is_ascii_hexdigit())));
        let mut distinct = ids.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), ids.len());
    }
}
