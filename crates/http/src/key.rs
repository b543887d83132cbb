//! The identity a client names by key, built in one place for every
//! endpoint that takes one (`/v1/check`'s `key`, `/v1/state`'s `key` and
//! `key.NAME` parts): a single value, or named parts in any order, the
//! same composite forward auth and bound RLS rules build, refused alike
//! when empty, repeated or too long.

use tollgate_core::Identity;

use crate::response::Problem;

/// A key's single value.
pub fn value_identity(value: &str, max_key_bytes: usize) -> Result<Identity, Problem> {
    if value.is_empty() {
        return Err(Problem::unprocessable("key must not be empty"));
    }
    bounded(Identity::value(value), max_key_bytes)
}

/// A key's named parts (`{"tenant": "acme"}`, `key.tenant=acme`).
pub fn parts_identity<'a>(
    parts: impl IntoIterator<Item = (&'a str, &'a str)>,
    max_key_bytes: usize,
) -> Result<Identity, Problem> {
    let identity =
        Identity::composite(parts).map_err(|e| Problem::unprocessable(format!("key: {e}")))?;
    bounded(identity, max_key_bytes)
}

fn bounded(identity: Identity, max_key_bytes: usize) -> Result<Identity, Problem> {
    if identity.as_bytes().len() > max_key_bytes {
        return Err(Problem::too_large(format!(
            "key is longer than {max_key_bytes} bytes"
        )));
    }
    Ok(identity)
}
