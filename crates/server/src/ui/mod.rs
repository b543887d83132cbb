//! The live page (`server.ui: on`, docs/http-api.md, The live page): what
//! an operator watches in a browser — each policy's decisions, rejections
//! and degraded decisions, each store's circuit, the hot identities (named
//! by their keyed hash only) and the leased shares. Read-only: the page is
//! three files compiled into the binary, which fetch nothing from
//! anywhere but `/ui/state`, and that is built from the counters
//! `/metrics` reads, never from its text.

mod state;

pub(crate) use state::state;

/// A file of the page, served as it is.
pub(crate) struct Asset {
    /// Its path.
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes, compiled in.
    pub body: &'static str,
}

/// The page and what it loads: no CDN, no font, nothing fetched from
/// elsewhere (its [`CONTENT_SECURITY_POLICY`] forbids it too).
pub(crate) const ASSETS: [Asset; 3] = [
    Asset {
        path: "/ui",
        content_type: "text/html; charset=utf-8",
        body: include_str!("assets/index.html"),
    },
    Asset {
        path: "/ui/ui.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("assets/ui.js"),
    },
    Asset {
        path: "/ui/ui.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/ui.css"),
    },
];

/// The JSON the page polls.
pub(crate) const STATE_PATH: &str = "/ui/state";

/// What the page may load and connect to: its own files and
/// [`STATE_PATH`], nothing inline, nothing from elsewhere, in no frame.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The asset served at `path`, if any.
pub(crate) fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}
