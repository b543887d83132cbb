//! envoyproxy/ratelimit's YAML config, read unchanged: part of the config,
//! loaded with it and replaced with it on reload. A limit is a fixed window
//! of `requests_per_unit` per `unit` (what users of envoyproxy/ratelimit
//! know); the `tollgate` key on a descriptor picks another algorithm or
//! binds one of tollgate's own policies.

mod descriptors;
mod files;
mod reading;
mod rule;
mod tree;
mod unit;

pub use files::stamp_into;
pub use reading::RulesError;
pub use rule::{Rule, RuleKind};
pub use tree::{EnvoyRules, MAX_DEPTH, Matched};
pub use unit::Unit;
