//! What a lease ledger is asked and answers: one instance's renewal of a
//! leased policy's identities, and a grant for each ([`crate::Ledger`];
//! the Redis ledger is crates/store/lua/lease.lua).

use tollgate_core::Identity;

/// Identities one script call carries at most: a call's work (and the time
/// it holds Redis) stays bounded; an instance renewing more makes one call
/// per this many.
pub const MAX_IDENTITIES_A_CALL: usize = 100;

/// One identity in a renewal, and the units it was asked for in this
/// instance's last renewal period.
#[derive(Debug, Clone, Copy)]
pub struct LeaseWant<'a> {
    /// The identity (its key encoding names its ledger entry).
    pub identity: &'a Identity,
    /// Units asked for (admitted or not) per renewal period.
    pub demand: u64,
}

/// One instance's renewal of a policy's identities: who asks, the
/// policy's terms, and each identity's demand.
#[derive(Debug, Clone, Copy)]
pub struct LeaseAsk<'a> {
    /// The policy whose ledger entries these are.
    pub policy: &'a str,
    /// The asking region (letters, digits, '-', '_').
    pub region: &'a str,
    /// The asking instance, unique within its region.
    pub instance: &'a str,
    /// Units of each identity's limit above every region's floor: what the
    /// ledger can lease.
    pub spare: u64,
    /// How long a grant lasts.
    pub term_ms: u64,
    /// How long units a region lets go rest before another may lease them.
    pub rest_ms: u64,
    /// The identities renewed (at most [`MAX_IDENTITIES_A_CALL`]).
    pub wants: &'a [LeaseWant<'a>],
}

/// Why a grant is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLimit {
    /// The whole target: the spare in proportion to demand.
    Target,
    /// Less: other regions hold (or rest) the rest of the spare.
    HeldByOthers,
    /// Nothing: the ledger is new (or came back empty) and waits out a
    /// term and a rest before it grants.
    NewLedger,
}

/// The ledger's answer for one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// Units the region may spend above its floor, for a term.
    pub units: u64,
    /// What its demand would have earned.
    pub target: u64,
    /// Why it is not more.
    pub limit: LeaseLimit,
    /// The ledger's clock when it granted (Redis TIME, ms).
    pub granted_at_ms: u64,
    /// The spare nobody holds after this grant: capacity no region's
    /// demand claimed (or that rests), stranded until one asks for it.
    pub unleased: u64,
}
