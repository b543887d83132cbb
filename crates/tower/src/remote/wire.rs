//! The `/v1/check` body as the client writes it and the decision as it
//! reads it, in tollgate-http's one schema (the server reads and writes
//! the same types): one check, or an all-or-nothing batch. The key goes
//! as the server reads keys — a single value as a string, a composite as
//! an object of its named parts — so a check asked remotely spends the
//! same identity's budget as one asked in process.

use tollgate_core::{Decision, Identity, PermitId, Policy};
use tollgate_http::{BatchDecision, CheckBody, CheckDecision, CheckItem, CheckKey, ReleaseBody};
use tollgate_store::{Check, StoreError};

/// The key of `identity`, read back from its encoding (tollgate-core's
/// `Identity`: a tag, then the value or LEB128-length-prefixed name and
/// value pairs). `None` for a shard or a value that is not UTF-8, which
/// `/v1/check` has no spelling for.
pub(crate) fn key_of(identity: &Identity) -> Option<CheckKey<'_>> {
    let (&tag, mut rest) = identity.as_bytes().split_first()?;
    match tag {
        0 => std::str::from_utf8(rest).ok().map(CheckKey::value),
        1 => {
            let mut parts = Vec::new();
            while !rest.is_empty() {
                let name = std::str::from_utf8(take_length_prefixed(&mut rest)?).ok()?;
                let value = std::str::from_utf8(take_length_prefixed(&mut rest)?).ok()?;
                parts.push((name, value));
            }
            Some(CheckKey::parts(parts))
        }
        _ => None,
    }
}

fn take_length_prefixed<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut len: usize = 0;
    let mut shift = 0u32;
    loop {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        len |= usize::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let (field, rest) = input.split_at_checked(len)?;
    *input = rest;
    Some(field)
}

/// The body for `checks`: one check's fields at the top, or `checks`.
pub(crate) fn body(checks: &[Check<'_>], request_id: Option<&str>) -> Result<Vec<u8>, StoreError> {
    fn key<'a>(check: &Check<'a>) -> Result<CheckKey<'a>, StoreError> {
        key_of(check.identity).ok_or_else(|| {
            StoreError::Config(format!(
                "identity {} has no /v1/check key (not UTF-8, or a shard)",
                check.identity
            ))
        })
    }
    let mut body = match checks {
        [one] => CheckBody::one(one.policy.name(), key(one)?, one.cost),
        _ => CheckBody::batch(
            checks
                .iter()
                .map(|c| Ok(CheckItem::new(c.policy.name(), key(c)?, c.cost)))
                .collect::<Result<Vec<_>, StoreError>>()?,
        ),
    };
    if let Some(id) = request_id {
        body = body.with_request_id(id);
    }
    serde_json::to_vec(&body).map_err(|e| StoreError::Protocol(e.to_string()))
}

/// The `/v1/release` body for `permit` of `policy` held by `identity`.
pub(crate) fn release_body(
    policy: &Policy,
    identity: &Identity,
    permit: PermitId,
) -> Result<Vec<u8>, StoreError> {
    let key = key_of(identity).ok_or_else(|| {
        StoreError::Config(format!(
            "identity {identity} has no /v1/release key (not UTF-8, or a shard)"
        ))
    })?;
    let body = ReleaseBody {
        policy: policy.name().into(),
        key,
        permit,
    };
    serde_json::to_vec(&body).map_err(|e| StoreError::Protocol(e.to_string()))
}

fn decision(d: &CheckDecision<'_>) -> Decision {
    Decision {
        allowed: d.allowed,
        limit: d.limit,
        remaining: i64::try_from(d.remaining).unwrap_or(i64::MAX),
        retry_after_ms: d.retry_after_ms,
        reset_after_ms: d.reset_after_ms,
        permit: d.permit,
    }
}

/// The decisions of an answer to `n` checks, and whether it was replayed.
pub(crate) fn decisions(body: &[u8], n: usize) -> Result<(Vec<Decision>, bool), StoreError> {
    let protocol = |e: serde_json::Error| StoreError::Protocol(format!("/v1/check answer: {e}"));
    let (parsed, replayed) = if n == 1 {
        let one: CheckDecision<'_> = serde_json::from_slice(body).map_err(protocol)?;
        let replayed = one.replayed;
        (vec![one], replayed)
    } else {
        let batch: BatchDecision<'_> = serde_json::from_slice(body).map_err(protocol)?;
        (batch.decisions, batch.replayed)
    };
    if parsed.len() != n {
        return Err(StoreError::Protocol(format!(
            "/v1/check answered {} decisions for {n} checks",
            parsed.len()
        )));
    }
    Ok((parsed.iter().map(decision).collect(), replayed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_key_is_its_string_and_a_composite_its_parts() {
        let value = Identity::value("acme");
        assert_eq!(key_of(&value), Some(CheckKey::value("acme")));
        let parts =
            Identity::composite([("x-tenant", "acme"), ("route", "/orders")]).expect("test value");
        assert_eq!(
            key_of(&parts),
            Some(CheckKey::parts([
                ("route", "/orders"),
                ("x-tenant", "acme")
            ]))
        );
        assert!(key_of(&value.shard(1)).is_none());
    }

    #[test]
    fn a_composite_is_written_as_an_object() {
        let policy = tollgate_core::Policy::new(
            "p",
            tollgate_core::Limits::FixedWindow(
                tollgate_core::Window::new(5, 1_000).expect("test value"),
            ),
        );
        let long = "v".repeat(300);
        let id = Identity::composite([("x-tenant", long.as_str())]).expect("test value");
        let check = Check {
            policy: &policy,
            identity: &id,
            cost: 2,
        };
        let written =
            String::from_utf8(body(&[check], Some("r1")).expect("test value")).expect("test value");
        assert_eq!(
            written,
            format!(r#"{{"policy":"p","key":{{"x-tenant":"{long}"}},"cost":2,"request_id":"r1"}}"#)
        );
    }
}
