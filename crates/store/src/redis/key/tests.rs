use tollgate_core::{Limits, Rate};

use super::*;

fn policy(name: &str) -> Policy {
    Policy::new(name, Limits::Gcra(Rate::new(10, 1, 1000).expect("valid")))
}

fn key(identity: &Identity) -> String {
    String::from_utf8_lossy(&state_key("tollgate", &policy("api"), identity)).into_owned()
}

#[test]
fn a_plain_value_reads_as_itself() {
    assert_eq!(
        key(&Identity::value("u12345")),
        "tollgate:api:gcra:{u12345}"
    );
}

#[test]
fn braces_percent_and_control_bytes_are_escaped() {
    assert_eq!(
        key(&Identity::value("a}b{c%d\ne")),
        "tollgate:api:gcra:{a%7Db%7Bc%25d%0Ae}"
    );
}

#[test]
fn a_closing_brace_in_an_identity_does_not_move_the_slot() {
    let id = Identity::value("acme}x");
    let a = state_key("tollgate", &policy("api"), &id);
    let b = state_key("tollgate", &policy("search"), &id);
    assert_eq!(slot(&a), slot(&b));
    // The tag is the whole escaped identity, not the part before the brace.
    assert_ne!(slot(&a), slot(b"{acme}"));
    assert_eq!(slot(&a), slot(b"{acme%7Dx}"));
}

#[test]
fn forms_cannot_collide() {
    let composite = Identity::composite([("tenant", "a")]).expect("valid");
    assert!(key(&composite).starts_with("tollgate:api:gcra:{%P"));
    assert_ne!(key(&Identity::value("%P")), key(&composite));
    assert_eq!(key(&Identity::value("%P")), "tollgate:api:gcra:{%25P}");
    assert_eq!(key(&Identity::value("")), "tollgate:api:gcra:{%E}");
    assert_eq!(key(&Identity::value("%E")), "tollgate:api:gcra:{%25E}");
}

#[test]
fn long_identities_become_a_fixed_length_hash() {
    let long = "x".repeat(MAX_TAG + 1);
    let k = key(&Identity::value(&long));
    assert!(k.starts_with("tollgate:api:gcra:{%H"), "{k}");
    assert_eq!(k.len(), "tollgate:api:gcra:{%H}".len() + 32);
    let exactly = "y".repeat(MAX_TAG);
    assert_eq!(
        key(&Identity::value(&exactly)),
        format!("tollgate:api:gcra:{{{exactly}}}")
    );
    assert_ne!(
        key(&Identity::value(&long)),
        key(&Identity::value(&"x".repeat(MAX_TAG + 2)))
    );
}

#[test]
fn slots_match_redis() {
    // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
    assert_eq!(crc16(b"123456789"), 0x31C3);
    assert_eq!(slot(b"foo"), 12182);
    assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
    assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
    assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
}
