//! A replay's totals per policy: checks offered, admitted and rejected,
//! each with its summed cost; a shadow policy's would-be rejections apart
//! (its checks all admit); refunds apart.

use std::collections::BTreeMap;
use std::fmt;

use super::Verdict;

/// Per policy, by name: events offered, admitted and rejected, each with
/// its summed cost.
#[derive(Debug, Default, Clone)]
pub struct Summary(BTreeMap<String, Tally>);

/// One policy's totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Checks admitted (a shadow policy's all are).
    pub admitted: u64,
    /// Their summed cost.
    pub admitted_cost: u64,
    /// Checks rejected.
    pub rejected: u64,
    /// Their summed cost.
    pub rejected_cost: u64,
    /// A shadow policy's admitted checks it would have rejected.
    pub would_reject: u64,
    /// Their summed cost.
    pub would_reject_cost: u64,
    /// Whether the policy decided in shadow mode.
    pub shadow: bool,
    /// Refunds made.
    pub refunds: u64,
    /// The units they gave back.
    pub refunded_units: u64,
}

impl Tally {
    /// Checks offered: admitted and rejected.
    pub fn offered(&self) -> u64 {
        self.admitted + self.rejected
    }

    /// Their summed cost.
    pub fn offered_cost(&self) -> u64 {
        self.admitted_cost.saturating_add(self.rejected_cost)
    }

    /// Counts one check of `cost` decided as `verdict`.
    pub fn count(&mut self, cost: u64, verdict: Verdict) {
        match verdict {
            Verdict::Rejected => {
                self.rejected += 1;
                self.rejected_cost = self.rejected_cost.saturating_add(cost);
                return;
            }
            Verdict::Admitted => {}
            Verdict::Shadow { would_allow } => {
                self.shadow = true;
                if !would_allow {
                    self.would_reject += 1;
                    self.would_reject_cost = self.would_reject_cost.saturating_add(cost);
                }
            }
        }
        self.admitted += 1;
        self.admitted_cost = self.admitted_cost.saturating_add(cost);
    }
}

impl Summary {
    /// Counts one check of `policy`.
    pub(crate) fn count(&mut self, policy: &str, cost: u64, verdict: Verdict) {
        // Looked up first: a policy's name is allocated once, not a check.
        match self.0.get_mut(policy) {
            Some(tally) => tally.count(cost, verdict),
            None => self
                .0
                .entry(policy.to_owned())
                .or_default()
                .count(cost, verdict),
        }
    }

    /// Counts a refund of `units` to `policy`.
    pub(crate) fn refund(&mut self, policy: &str, units: u64) {
        let tally = match self.0.get_mut(policy) {
            Some(tally) => tally,
            None => self.0.entry(policy.to_owned()).or_default(),
        };
        tally.refunds += 1;
        tally.refunded_units = tally.refunded_units.saturating_add(units);
    }

    /// The policy's totals, if it decided anything.
    pub fn tally(&self, policy: &str) -> Option<&Tally> {
        self.0.get(policy)
    }

    /// Every policy's totals, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tally)> {
        self.0.iter().map(|(name, tally)| (name.as_str(), tally))
    }
}

/// One line a policy, in name order: `fw: offered 3 (cost 4), admitted 2
/// (cost 3), rejected 1 (cost 1)` — checks counted, their costs summed —
/// then `, shadow: would have rejected 1 (cost 1)` after a shadow policy,
/// and `, refunded 1 (units 2)` after a policy that had refunds.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, t) in &self.0 {
            write!(
                f,
                "{name}: offered {} (cost {}), admitted {} (cost {}), rejected {} (cost {})",
                t.offered(),
                t.offered_cost(),
                t.admitted,
                t.admitted_cost,
                t.rejected,
                t.rejected_cost
            )?;
            if t.shadow {
                write!(
                    f,
                    ", shadow: would have rejected {} (cost {})",
                    t.would_reject, t.would_reject_cost
                )?;
            }
            if t.refunds > 0 {
                write!(f, ", refunded {} (units {})", t.refunds, t.refunded_units)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
