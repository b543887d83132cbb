//! The policies a replay decides by, as `serve` decides them: each
//! configured policy as it is enforced (a split scope's region share,
//! not the declared limit) and in shadow mode when `serve` would put it
//! there (its own `mode: shadow`, or `server.shadow_mode`); then each
//! unbound envoyproxy/ratelimit rule's own policy (`domain.key`, a fixed
//! window), so a capture of RLS traffic replays. A per-request `limit`
//! override is not among them: its limit was the request's.

use tollgate_core::{Limits, Policy};

use crate::config::ServeConfig;
use crate::envoy_rules::RuleKind;

/// One policy as a replay decides it.
#[derive(Debug, Clone)]
pub struct ReplayPolicy {
    /// The policy `serve` decides by.
    pub policy: Policy,
    /// Decided, spent and counted, never enforced: its would-be rejections
    /// are counted apart, and its checks admit.
    pub shadow: bool,
}

impl ReplayPolicy {
    /// The policy's name.
    pub fn name(&self) -> &str {
        self.policy.name()
    }

    /// The policy's limits.
    pub fn limits(&self) -> &Limits {
        self.policy.limits()
    }
}

/// What `tollgate replay` decides by, in the file's order (configured
/// policies first, then the rules' own).
pub fn replay_policies(config: &ServeConfig) -> Vec<ReplayPolicy> {
    let shadow_mode = config.server.shadow_mode;
    let mut list: Vec<ReplayPolicy> = config
        .policies
        .iter()
        .map(|serve| ReplayPolicy {
            policy: serve.policy.clone(),
            shadow: serve.shadow || shadow_mode,
        })
        .collect();
    for rule in &config.envoy.rules {
        if let RuleKind::Limited {
            policy,
            bound: None,
        } = &rule.kind
            && !list.iter().any(|p| p.name() == policy.name())
        {
            list.push(ReplayPolicy {
                policy: policy.clone(),
                shadow: shadow_mode,
            });
        }
    }
    list
}
