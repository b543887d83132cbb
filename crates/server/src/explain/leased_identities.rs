//! What a `leased` policy promises per identity, for `explain`: the bound
//! each identity keeps, its floor in each region, and what the ledger
//! costs for a number of hot identities (identities within their floor
//! cost it nothing).

use serde_json::{Value, json};
use tollgate_core::format_duration_ms;
use tollgate_store::MAX_IDENTITIES_A_CALL;

use crate::config::Deployment;
use tollgate_config::Leased;

/// The per-identity terms in words (the bound, then the ledger's cost)
/// and JSON.
pub(super) fn identity_terms(
    leased: &Leased,
    limit: u64,
    deployment: &Deployment,
) -> (Vec<String>, Value) {
    let per_call = MAX_IDENTITIES_A_CALL as u64;
    let max = leased.max_identities as u64;
    let calls_at_bound = max.div_ceil(per_call);
    let per_second = |calls: u64| calls as f64 * 1000.0 / leased.renew_ms as f64;
    let instances: u64 = deployment.regions.iter().map(|r| r.instances).sum();
    let floors: Vec<String> = leased
        .floors
        .iter()
        .map(|(r, f)| format!("{r} {f}"))
        .collect();
    let bound = format!(
        "per identity: every identity has its own floor in each region ({}) and leases its own spare by its own demand, so the bound, at most the limit ({limit}), holds for each identity, and a tenant busy in one region gets nearly its whole limit there whoever is busy elsewhere.",
        floors.join(", "),
    );
    let cost = format!(
        "ledger cost: identities within their floor cost nothing; those wanting more are renewed together, 1 call per instance every {} ({} calls/s per instance) carrying up to {per_call} identities, {calls_at_bound} calls every {} ({} calls/s) at this instance's bound of {max} leased identities (beyond it an identity spends its floor, counted){}.",
        format_duration_ms(leased.renew_ms),
        rate(per_second(1)),
        format_duration_ms(leased.renew_ms),
        rate(per_second(calls_at_bound)),
        if instances > 0 {
            format!(
                "; {} calls/s for the {instances} instances `regions:` lists while each has up to {per_call}",
                rate(per_second(instances))
            )
        } else {
            String::new()
        },
    );
    let json = json!({
        "per_identity": true,
        "max_identities": max,
        "identities_per_call": per_call,
        "ledger_calls_per_second_per_instance": {
            "up_to_identities_per_call": per_second(1),
            "at_max_identities": per_second(calls_at_bound),
        },
    });
    (vec![bound, cost], json)
}

/// Calls a second, without trailing zeros.
fn rate(calls: f64) -> String {
    let text = format!("{calls:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}
