//! The live page (`server.ui`, docs/http-api.md, The live page): its JSON
//! state in-process with exact counts, the admin token and off by default;
//! and the page itself in a real headless Chromium against a real
//! `tollgate serve` on a real redis-server under load.

#[path = "../support/mod.rs"]
mod support;

mod browser;
mod settings;
mod state;
mod webdriver;
