use super::*;

#[test]
fn one_line_per_policy_per_interval_and_the_rest_counted() {
    let log = DecisionLog::default();
    assert_eq!(log.due_at("api", 1_000), Some(0));
    assert_eq!(log.due_at("api", 1_001), None);
    assert_eq!(log.due_at("api", 10_999), None);
    // Another policy has its own interval.
    assert_eq!(log.due_at("login", 5_000), Some(0));
    assert_eq!(log.due_at("api", 11_000), Some(2));
    assert_eq!(log.due_at("api", 11_001), None);
    assert_eq!(log.due_at("api", 30_000), Some(1));
    assert_eq!(log.due_at("login", 5_001), None);
}
