//! `compare --against OLD`: the trace decided by the old config and by
//! the new one side by side, event by event, each as `replay` decides it
//! (its checks by their own policies, together); per policy, what the
//! new one admits or rejects that the old did not, and whose.

use std::collections::BTreeSet;
use std::io::BufRead;

use tollgate_core::Identity;

use super::names::Namer;
use super::{
    Change, CompareError, CompareOptions, Events, MAX_NAMED, Row, Side, fault_error, memory, pick,
    replay_error, seen,
};
use crate::config::ServeConfig;
use crate::plot::Plot;
use crate::replay::{Decider, Event, Outcome, ReplayPolicy, Seen, replay_policies};

/// One policy's two sides and what changed.
struct Compared {
    policy: String,
    before: Option<Side>,
    after: Option<Side>,
    change: Change,
}

/// The old and new configs' decisions of the trace, per policy.
pub(super) async fn against(
    options: &CompareOptions,
    old: &ServeConfig,
    new: &ServeConfig,
    input: impl BufRead,
) -> Result<(Vec<Row>, Option<String>), CompareError> {
    let (old_policies, new_policies) = (replay_policies(old), replay_policies(new));
    let mut all = new_policies.clone();
    all.extend(
        old_policies
            .iter()
            .filter(|p| !new_policies.iter().any(|n| n.name() == p.name()))
            .cloned(),
    );
    let shown: Vec<String> = pick(&all, &options.policies)?
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    let target = memory(options);
    let before = Decider::open(&old_policies, &target)
        .await
        .map_err(|e| replay_error(options, e))?;
    let after = Decider::open(&new_policies, &target)
        .await
        .map_err(|e| replay_error(options, e))?;
    let mut compared: Vec<Compared> = shown
        .iter()
        .map(|name| Compared {
            policy: name.clone(),
            before: side_of(&old_policies, name),
            after: side_of(&new_policies, name),
            change: Change::default(),
        })
        .collect();
    let mut plot = options
        .plot
        .then(|| Plot::labeled(labels(&shown, &old_policies, &new_policies)));
    let namer = Namer::new(&new.server.identity_key_env, key(new).as_deref());
    let mut events = Events::new(input);
    while let Some((number, event)) = events.next().map_err(|e| replay_error(options, e))? {
        let was = before
            .decide(&event)
            .await
            .map_err(|f| fault_error(options, number, f.named("the old config")))?;
        let now = after
            .decide(&event)
            .await
            .map_err(|f| fault_error(options, number, f.named("the new config")))?;
        let decided = Decided {
            event: &event,
            was: &was,
            now: &now,
        };
        decided
            .count(&mut compared, plot.as_mut(), &namer)
            .map_err(CompareError::Names)?;
        if number.is_multiple_of(65_536) {
            before.sweep();
            after.sweep();
        }
    }
    let rows = compared
        .into_iter()
        .map(|c| Row {
            policy: c.policy,
            side: c.after,
            before: c.before,
            change: Some(c.change),
        })
        .collect();
    Ok((rows, plot.map(|p| p.svg())))
}

/// One event as both configs decided it.
struct Decided<'a> {
    event: &'a Event,
    was: &'a Outcome,
    now: &'a Outcome,
}

impl Decided<'_> {
    /// Counts each check of the event on both sides of its policy's row
    /// (a refund's units apart), draws it, and notes a changed verdict.
    fn count(
        &self,
        compared: &mut [Compared],
        mut plot: Option<&mut Plot>,
        namer: &Namer,
    ) -> Result<(), String> {
        let (event, was, now) = (self.event, self.was, self.now);
        let spent = |o: &Outcome| o.verdicts.iter().all(|v| v.admitted());
        let (was_spent, now_spent) = (spent(was), spent(now));
        for (i, item) in event.items().iter().enumerate() {
            let Some(row) = compared.iter_mut().find(|c| c.policy == item.policy) else {
                continue;
            };
            let identity = &now.identities[i];
            if event.refund {
                refund(row.before.as_mut(), was.refunded);
                refund(row.after.as_mut(), now.refunded);
                continue;
            }
            let (old_v, new_v) = (was.verdicts[i], now.verdicts[i]);
            let sides = [
                (
                    row.before.as_mut(),
                    old_v,
                    was_spent,
                    &was.decisions[i],
                    "old",
                ),
                (
                    row.after.as_mut(),
                    new_v,
                    now_spent,
                    &now.decisions[i],
                    "new",
                ),
            ];
            for (side, verdict, spent, decision, label) in sides {
                if let Some(side) = side {
                    side.count(identity, event.t_ms, item.cost, verdict, spent);
                }
                if let Some(plot) = plot.as_deref_mut() {
                    let seen = seen(&item.policy, event.t_ms, identity, item.cost, decision);
                    plot.see_as(
                        &format!("{label}: {}", item.policy),
                        &Seen {
                            verdict,
                            request_admitted: spent,
                            ..seen
                        },
                    );
                }
            }
            if old_v.admitted() != new_v.admitted() {
                note(
                    &mut row.change,
                    namer,
                    identity,
                    item.cost,
                    new_v.admitted(),
                )?;
            }
        }
        Ok(())
    }
}

/// Counts a refund's units on `side`.
fn refund(side: Option<&mut Side>, units: Option<u64>) {
    if let (Some(side), Some(units)) = (side, units) {
        side.tally.refunds += 1;
        side.tally.refunded_units = side.tally.refunded_units.saturating_add(units);
    }
}

/// The side of `name` in `policies`, if it has it.
fn side_of(policies: &[ReplayPolicy], name: &str) -> Option<Side> {
    policies.iter().find(|p| p.name() == name).map(Side::new)
}

/// The charts of a picture comparing two configs: each shown policy's
/// old then new, where each config has it.
fn labels(
    shown: &[String],
    old: &[ReplayPolicy],
    new: &[ReplayPolicy],
) -> Vec<(String, ReplayPolicy)> {
    let mut charts = Vec::new();
    for name in shown {
        for (label, policies) in [("old", old), ("new", new)] {
            if let Some(policy) = policies.iter().find(|p| p.name() == name) {
                charts.push((format!("{label}: {name}"), policy.clone()));
            }
        }
    }
    charts
}

/// The identity key of `config`, from its variable.
fn key(config: &ServeConfig) -> Option<String> {
    std::env::var(&config.server.identity_key_env)
        .ok()
        .filter(|k| !k.is_empty())
}

/// Counts a changed check of `cost` and names its identity: newly
/// admitted when `admitted`, else newly rejected.
fn note(
    change: &mut Change,
    namer: &Namer,
    identity: &Identity,
    cost: u64,
    admitted: bool,
) -> Result<(), String> {
    let (count, names): (&mut (u64, u64), &mut BTreeSet<String>) = if admitted {
        (&mut change.newly_admitted, &mut change.admitted_identities)
    } else {
        (&mut change.newly_rejected, &mut change.rejected_identities)
    };
    count.0 += 1;
    count.1 = count.1.saturating_add(cost);
    let name = namer.name(identity)?;
    if names.contains(&name) {
        return Ok(());
    }
    if names.len() >= MAX_NAMED {
        change.left_out += 1;
        return Ok(());
    }
    names.insert(name);
    Ok(())
}
