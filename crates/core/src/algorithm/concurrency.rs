//! concurrency: permits held from acquire until release or until their
//! lease ends, whichever is first (docs/design.md §3). The permit's id is
//! an input: the caller mints it, so the transition stays a pure function
//! and a retry under one request id can name the same permit again.

use super::Taken;
use crate::decision::Decision;
use crate::permit::PermitId;
use crate::policy::Permits;

/// One held permit and when its lease ends (store time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The permit's name, as its holder releases it.
    pub permit: PermitId,
    /// The first ms at which it is no longer held.
    pub expires_ms: u64,
}

/// Stored state: the permits held, at most the limit of unexpired ones.
/// No clock of its own: a store clock stepping back only makes every
/// lease look longer, which is stricter, never looser.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PermitState {
    /// In no particular order; at most N are unexpired.
    pub held: Vec<Held>,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The permit was held and is free now.
    Freed,
    /// The permit's lease had ended: it was already free.
    Expired,
    /// No such permit: never acquired, already released, or forgotten
    /// once its lease ended.
    Unknown,
}

impl Released {
    /// Whether the release freed a held permit: the answer a caller sees.
    pub fn freed(self) -> bool {
        self == Released::Freed
    }
}

impl PermitState {
    /// Drops the permits whose lease ended by `now_ms`; returns how many.
    pub fn drop_expired(&mut self, now_ms: u64) -> usize {
        let before = self.held.len();
        self.held.retain(|h| h.expires_ms > now_ms);
        before - self.held.len()
    }
}

/// An acquire (cost 1), a look (cost 0), or a cost no single permit can
/// be (above 1: never admitted). `permit` is the id an admitted acquire
/// holds; one already held is held again from now (a retry, not a second
/// permit).
pub(super) fn decide(
    permits: &Permits,
    state: &mut Option<PermitState>,
    now_ms: u64,
    cost: u64,
    consume: bool,
    permit: PermitId,
) -> Decision {
    let limit = permits.limit();
    let own = state.get_or_insert_with(PermitState::default);
    own.drop_expired(now_ms);
    let again = own.held.iter().position(|h| h.permit == permit);
    let held = own.held.len() as u64;
    let allowed = match cost {
        0 => true,
        1 => again.is_some() || held < limit,
        _ => false,
    };
    let acquired = allowed && consume && cost == 1;
    if acquired {
        let expires_ms = now_ms.saturating_add(permits.lease_ms());
        match again {
            Some(i) => own.held[i].expires_ms = expires_ms,
            None => own.held.push(Held { permit, expires_ms }),
        }
    }
    let held = own.held.len() as u64;
    let earliest = own.held.iter().map(|h| h.expires_ms).min();
    let latest = own.held.iter().map(|h| h.expires_ms).max();
    let retry_after_ms = if allowed {
        Some(0)
    } else if cost > 1 || cost > limit {
        None
    } else {
        // Full: the first lease to end frees one (a release may come sooner).
        Some(earliest.map_or(0, |e| e.saturating_sub(now_ms)))
    };
    if own.held.is_empty() {
        *state = None;
    }
    Decision {
        allowed,
        limit,
        remaining: i64::try_from(limit.saturating_sub(held)).unwrap_or(i64::MAX),
        retry_after_ms,
        reset_after_ms: latest.map_or(0, |l| l.saturating_sub(now_ms)),
        permit: acquired.then_some(permit),
    }
}

/// Frees `permit` if it is held at `now_ms`.
pub(super) fn release(state: &mut Option<PermitState>, now_ms: u64, permit: PermitId) -> Released {
    let Some(own) = state.as_mut() else {
        return Released::Unknown;
    };
    let found = match own.held.iter().position(|h| h.permit == permit) {
        Some(i) if own.held[i].expires_ms > now_ms => {
            own.held.swap_remove(i);
            Released::Freed
        }
        Some(_) => Released::Expired,
        None => Released::Unknown,
    };
    own.drop_expired(now_ms);
    if own.held.is_empty() {
        *state = None;
    }
    found
}

/// The first ms a cost-1 acquire would be admitted: now while a permit is
/// free, else when the first lease ends.
pub(super) fn admits_one_from_ms(permits: &Permits, state: &PermitState, now_ms: u64) -> u64 {
    let live = state.held.iter().filter(|h| h.expires_ms > now_ms);
    if (live.clone().count() as u64) < permits.limit() {
        return now_ms;
    }
    live.map(|h| h.expires_ms).min().unwrap_or(now_ms)
}

/// Permits are released by id, never given back as units: nothing goes back.
pub(super) fn give_back(
    _permits: &Permits,
    _state: &mut Option<PermitState>,
    _now_ms: u64,
    _units: u64,
    _taken: Taken,
) -> u64 {
    0
}
