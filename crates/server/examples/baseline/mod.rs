//! What the load harnesses' baselines share: the body of `/v1/check` they
//! parse (its `policy` is read and ignored, as tollgate's is not).

use serde::Deserialize;

#[derive(Deserialize)]
pub struct CheckBody<'a> {
    #[allow(dead_code)]
    pub policy: &'a str,
    pub key: &'a str,
    #[serde(default)]
    pub cost: Option<u64>,
}
