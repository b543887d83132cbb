//! What each scope promises, for `explain`: who decides, the bound in
//! words and, when the config states enough, as a number; a split's
//! shares and a lease's terms. One function a scope, so a new scope is
//! one more function and one more arm.

use crate::limiter::RedisConfig;
use serde_json::{Value, json};
use tollgate_core::{Policy, format_duration_ms, split_shares};

use super::leased_identities::identity_terms;
use super::{plural, topology};
use crate::config::Deployment;
use crate::config::{ServeConfig, ServePolicy, StoreSettings};
use tollgate_config::{Leased, Scope};

/// What `serve`'s scope promises, deciding on the store `role` (`redis`
/// when that store is a Redis).
pub(super) fn promise(
    config: &ServeConfig,
    serve: &ServePolicy,
    role: &str,
    redis: Option<&RedisConfig>,
) -> Promise {
    let declared = &serve.declared;
    match &serve.scope {
        Scope::Instance => instance_promise(declared, &config.deployment),
        Scope::Region => region_promise(declared, &config.deployment, role),
        Scope::Split { weights } => split_promise(serve, &config.deployment, role, weights),
        Scope::Leased(leased) => leased_promise(config, serve, role, leased),
        Scope::Global => global_promise(declared, role, redis),
    }
}

/// What a scope promises: who decides, the bound in words and, when the
/// config states enough to make it a number, the most admitted. A split's
/// shares and a lease's terms come with it, in words and JSON.
pub(super) struct Promise {
    pub scope_text: String,
    pub bound_text: String,
    pub at_most: Option<u64>,
    pub split: (Option<String>, Value),
    pub lease: (Option<Vec<String>>, Value),
}

impl Promise {
    /// A scope with neither shares nor lease terms.
    fn plain(scope_text: String, bound_text: String, at_most: Option<u64>) -> Self {
        Promise {
            scope_text,
            bound_text,
            at_most,
            split: (None, Value::Null),
            lease: (None, Value::Null),
        }
    }
}

/// `instance`: N processes admit N × the limit; N is known when
/// `regions:` lists the instances.
fn instance_promise(declared: &Policy, deployment: &Deployment) -> Promise {
    let n = deployment.instances();
    let one = admits(declared, 1);
    let bound_text = match n {
        Some(n) => format!(
            "at most {n} × the limit: {}, across the {n} instance{} `regions:` lists.",
            admits(declared, n),
            plural(n)
        ),
        None => format!(
            "at most N × the limit ({one}) for N tollgate processes (list `regions:` with their instances to state N)."
        ),
    };
    Promise::plain(
        "instance: each tollgate process decides alone, on its memory store.".into(),
        bound_text,
        n.map(|n| n.saturating_mul(declared.limits().limit())),
    )
}

/// `region`: R regions admit R × the limit; R is known when `regions:`
/// lists them.
fn region_promise(declared: &Policy, deployment: &Deployment, role: &str) -> Promise {
    let regions = deployment.regions.len() as u64;
    let one = admits(declared, 1);
    let bound_text = if regions > 0 {
        format!(
            "at most {regions} × the limit: {}, across the {regions} region{} `regions:` lists.",
            admits(declared, regions),
            plural(regions)
        )
    } else {
        format!("at most R × the limit ({one}) for R regions (list `regions:` to state R).")
    };
    Promise::plain(
        format!("region: each region decides alone, on its regional store ({role})."),
        bound_text,
        (regions > 0).then(|| regions.saturating_mul(declared.limits().limit())),
    )
}

/// `split`: fixed shares that sum to the limit, and what they strand when
/// the traffic is all in one region.
fn split_promise(
    serve: &ServePolicy,
    deployment: &Deployment,
    role: &str,
    weights: &[(String, u64)],
) -> Promise {
    let limit = serve.declared.limits().limit();
    let w: Vec<u64> = weights.iter().map(|(_, w)| *w).collect();
    let shares = split_shares(limit, &w);
    let listed: Vec<String> = weights
        .iter()
        .zip(&shares)
        .map(|((r, _), s)| format!("{r} {s}"))
        .collect();
    let this = deployment.region.as_deref().unwrap_or("?");
    let largest = shares.iter().copied().max().unwrap_or(0);
    let text = format!(
        "shares of {limit}: {} (largest remainder, ties to the first region by name; they sum to {limit}; a bucket's refill splits exactly by weight); this instance ({this}) enforces {}. With all traffic in one region at most its share is admitted: at least {} of the {limit} strands in the quiet regions (what a busy region's share turns away: tollgate_split_turned_away_units_total).",
        listed.join(", "),
        admits(&serve.policy, 1),
        limit - largest.min(limit)
    );
    let json = json!({
        "shares": weights.iter().zip(&shares).map(|((r, _), s)| (r.clone(), json!(s))).collect::<serde_json::Map<_, _>>(),
        "this_region": deployment.region,
        "enforced_here": serve.policy.limits().limit(),
        "stranded_when_one_region_is_busy_at_least": limit - largest.min(limit),
    });
    Promise {
        split: (Some(text), json),
        ..Promise::plain(
            format!(
                "split: each region enforces its fixed share alone, on its regional store ({role})."
            ),
            format!(
                "at most the limit, {}: the shares never sum above it.",
                admits(&serve.declared, 1)
            ),
            Some(limit),
        )
    }
}

/// `leased`: floors plus what the ledger leases by demand, which never sum
/// above the limit.
fn leased_promise(
    config: &ServeConfig,
    serve: &ServePolicy,
    role: &str,
    leased: &Leased,
) -> Promise {
    Promise {
        lease: lease_terms(config, serve, leased),
        ..Promise::plain(
            format!(
                "leased: each region spends its floor and a share leased from a ledger in the global store, deciding on its regional store ({role})."
            ),
            format!(
                "at most the limit, {}: floors and live leases never sum above it, and units moving between regions rest first.",
                admits(&serve.declared, 1)
            ),
            Some(serve.declared.limits().limit()),
        )
    }
}

/// A lease's terms: the floors, where the ledger is, how fast units move
/// between regions and what this instance spends, in words (an item a
/// line) and JSON.
fn lease_terms(
    config: &ServeConfig,
    serve: &ServePolicy,
    leased: &Leased,
) -> (Option<Vec<String>>, Value) {
    let declared = &serve.declared;
    let limit = declared.limits().limit();
    let deployment = &config.deployment;
    let floors: Vec<String> = leased
        .floors
        .iter()
        .map(|(r, f)| format!("{r} {f}"))
        .collect();
    let this = deployment.region.as_deref().unwrap_or("?");
    let global = config
        .stores
        .index("global")
        .map(|i| &config.stores.list[i].1);
    let several = deployment.regions.iter().any(|r| r.instances > 1);
    let converge = convergence(leased, several, global);
    let ledger = match global {
        Some(StoreSettings::Redis(g)) => format!(
            "{}, keys {}:{}:<identity>",
            topology(g),
            tollgate_store::ledger_epoch_key(&g.prefix),
            declared.name()
        ),
        _ => "the global store".to_owned(),
    };
    let mut items = vec![
        format!(
            "floors: {}% of {limit}, by region weight, never leased away: {}.",
            leased.floor_percent,
            floors.join(", ")
        ),
        format!(
            "spare: {}, leased by demand from the ledger in the global store ({ledger}).",
            leased.spare
        ),
        format!(
            "term: {}, renewed every {}; units one region lets go rest {} (the policy's time to forget a use) before another may lease them.",
            format_duration_ms(leased.term_ms),
            format_duration_ms(leased.renew_ms),
            format_duration_ms(leased.rest_ms),
        ),
        format!(
            "converges: a busy region gets what a quiet one let go within {} of a shift in demand{}.",
            format_duration_ms(converge.ms),
            converge.why,
        ),
        format!(
            "this instance ({this}): spends its floor {} plus what it holds; cut off from the ledger it falls to its floor at most a term after its last renewal.",
            leased.floor_of(this),
        ),
        format!(
            "a ledger restarted empty: grants nothing for a term and a rest (every region on its floor meanwhile: at least {} of the {limit} unused).",
            leased.spare,
        ),
    ];
    let json = json!({
        "floors": leased.floors.iter().map(|(r, f)| (r.clone(), json!(f))).collect::<serde_json::Map<_, _>>(),
        "floor_percent": leased.floor_percent,
        "spare": leased.spare,
        "term_ms": leased.term_ms,
        "renew_ms": leased.renew_ms,
        "rest_ms": leased.rest_ms,
        "converges_within_ms": converge.ms,
        "this_region": deployment.region,
        "floor_here": leased.floor_of(this),
    });
    let (each_items, each_json) = identity_terms(leased, limit, deployment);
    items.extend(each_items);
    let mut json = json;
    if let (Value::Object(all), Value::Object(each)) = (&mut json, each_json) {
        all.extend(each);
    }
    (Some(items), json)
}

/// How long after a shift in demand a busy region holds what a quiet one
/// let go (docs/config.md, Leased shares, Convergence), and the sum in words.
struct Convergence {
    ms: u64,
    why: String,
}

/// term + rest + k·renew + a round trip to the ledger. A renewal reports
/// the demand of the period before it, so the quiet region's first renewal
/// after the shift still reports demand and is granted; with several
/// instances a region, the region's demand is the sum of each instance's
/// latest report, and one not yet renewed keeps it up for another renewal
/// (k = 3; with one instance a region, k = 2). That last grant is spent for
/// a term and rests; the busy region takes it at its first renewal after
/// (one more renew, and the round trip that brings the grant back). A
/// renewal answered at all came back within the global store's timeout.
/// `several`: some region runs more than one instance (`regions:`).
fn convergence(leased: &Leased, several: bool, global: Option<&StoreSettings>) -> Convergence {
    let renewals: u64 = if several { 3 } else { 2 };
    let round_trip_ms = match global {
        Some(StoreSettings::Redis(g)) => g.timeout_ms,
        _ => 0,
    };
    let ms = leased
        .term_ms
        .saturating_add(leased.rest_ms)
        .saturating_add(renewals.saturating_mul(leased.renew_ms))
        .saturating_add(round_trip_ms);
    let (late, instances) = if renewals == 2 {
        ("1 renewal", "one instance a region")
    } else {
        (
            "2 renewals",
            "several instances a region: each keeps its last report until it renews",
        )
    };
    let why = format!(
        ": term + rest + {renewals} × renew + a round trip to the global store (at most its timeout, {}). A renewal reports the period before it, so the quiet region is still granted up to {late} after the shift ({instances}); that grant runs a term and rests, and the busy region takes it at its next renewal",
        format_duration_ms(round_trip_ms),
    );
    Convergence { ms, why }
}

/// `global`: exact on one Redis or a Cluster; a Sentinel failover can
/// forget what was not replicated, so it gives no number.
fn global_promise(declared: &Policy, role: &str, redis: Option<&RedisConfig>) -> Promise {
    let one = admits(declared, 1);
    let topology = redis.map_or("memory", topology);
    let bound_text = match topology {
        "sentinel" => format!(
            "the limit, {one}, while the master lives; a Sentinel failover forgets what the old master acknowledged but had not replicated, so up to the decisions of the replication lag more (Redis replication is asynchronous: not bounded by tollgate)."
        ),
        "cluster" => format!(
            "the limit, {one}, exact (a request whose checks span Cluster slots may be rejected after some slots consumed, never admitted beyond a limit: docs/redis.md)."
        ),
        _ => format!(
            "the limit, {one}, exact: one Redis decides every request, atomically on its own clock (while it keeps its data: one restarted empty forgets what was spent, up to one more limit)."
        ),
    };
    Promise::plain(
        format!("global: every decision on the global store ({role}, redis {topology})."),
        bound_text,
        (topology != "sentinel").then_some(declared.limits().limit()),
    )
}

/// What `factor` copies of `policy` admit, in the policy's own units: a
/// window's count per window, a bucket's burst then its refill rate, a
/// concurrency policy's permits in flight.
fn admits(policy: &Policy, factor: u64) -> String {
    // Permits are held, not spent: a count at any instant, not per span.
    if policy.limits().holds_permits() {
        let limit = policy.limits().limit();
        return format!("{} in flight", limit.saturating_mul(factor));
    }
    let (count, span_ms) = policy.limits().count_per_span();
    let pace = format!(
        "{} per {}",
        count.saturating_mul(factor),
        format_duration_ms(span_ms)
    );
    match policy.limits().burst() {
        Some(burst) => format!("a burst of {} then {pace}", burst.saturating_mul(factor)),
        None => pace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figure holds from the shift: the quiet region's stale reports
    /// (one renewal with one instance a region, two with more), a term, a
    /// rest, the busy region's next renewal and its round trip.
    #[test]
    fn convergence_counts_the_quiet_regions_stale_reports_and_a_round_trip() {
        let leased = Leased {
            term_ms: 2_000,
            renew_ms: 250,
            rest_ms: 1_000,
            floor_percent: 50,
            floors: vec![("a".into(), 10), ("b".into(), 10)],
            spare: 20,
            max_identities: 1_000,
        };
        let mut global = RedisConfig::standalone("redis://127.0.0.1:1");
        global.timeout_ms = 250;
        let global = StoreSettings::Redis(Box::new(global));
        let alone = convergence(&leased, false, Some(&global));
        assert_eq!(alone.ms, 2_000 + 1_000 + 2 * 250 + 250);
        assert_eq!(
            alone.why,
            ": term + rest + 2 × renew + a round trip to the global store (at most its timeout, 250ms). A renewal reports the period before it, so the quiet region is still granted up to 1 renewal after the shift (one instance a region); that grant runs a term and rests, and the busy region takes it at its next renewal"
        );
        let several = convergence(&leased, true, Some(&global));
        assert_eq!(several.ms, 2_000 + 1_000 + 3 * 250 + 250);
        assert!(several.why.starts_with(": term + rest + 3 × renew"));
    }
}
