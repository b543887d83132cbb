//! A policy's `RateLimit-Policy` item as a header value that every answer
//! can carry without touching a reference count.
//!
//! A value built at load time and cloned onto each answer is a shared
//! buffer: each clone and each drop is an atomic read-modify-write, which
//! on an otherwise lock-free admission costs as much as rendering the
//! field. A `'static` value clones as a pointer. So each distinct item is
//! kept once for the life of the process, up to [`MAX_STATIC_POLICY_VALUES`]
//! items (config reloads that keep their policies find theirs again);
//! beyond that bound an item's value is an ordinary shared one.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use http::HeaderValue;

/// Distinct policy items kept for the life of the process: a reload that
/// keeps its policies finds them, and a reload loop with new numbers
/// every time stops adding here at this bound.
pub const MAX_STATIC_POLICY_VALUES: usize = 4096;

static KEPT: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();

/// `item` (a [`policy_item`](crate::policy_item)) as a header value:
/// `'static` while fewer than [`MAX_STATIC_POLICY_VALUES`] items are kept,
/// shared after; `None` when it is no valid header value.
pub fn policy_value(item: &str) -> Option<HeaderValue> {
    let shared = HeaderValue::from_str(item).ok()?;
    let kept = KEPT.get_or_init(|| Mutex::new(HashSet::new()));
    let Ok(mut kept) = kept.lock() else {
        return Some(shared);
    };
    let found = match kept.get(item) {
        Some(&found) => found,
        None if kept.len() < MAX_STATIC_POLICY_VALUES => {
            let leaked: &'static str = Box::leak(item.to_owned().into_boxed_str());
            kept.insert(leaked);
            leaked
        }
        None => return Some(shared),
    };
    // Checked by `from_str` above: `from_static` cannot refuse it.
    Some(HeaderValue::from_static(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so that nothing else fills the process-wide set while it
    /// runs: an item is kept once and found again; a bad one is `None`;
    /// past the bound a new item is still answered, by a value of its own.
    #[test]
    fn items_are_kept_once_up_to_the_bound() {
        // Each pair is alive at once, so the allocator cannot hand the
        // same address to two values that are not one kept item.
        let kept_once = |item: &str| {
            let (first, second) = (policy_value(item), policy_value(item));
            let at = |v: &Option<HeaderValue>| v.as_ref().map(|v| v.as_bytes().as_ptr());
            assert_eq!(
                first.as_ref().map(HeaderValue::as_bytes),
                Some(item.as_bytes())
            );
            at(&first) == at(&second)
        };
        let item = "\"kept\";q=20;w=4";
        assert!(kept_once(item));
        assert_eq!(policy_value("bad\nitem"), None);
        for n in 0..MAX_STATIC_POLICY_VALUES {
            let _ = policy_value(&format!("\"p{n}\";q=1;w=1"));
        }
        assert!(
            !kept_once("\"beyond\";q=1;w=1"),
            "past the bound, nothing more is kept"
        );
        assert!(kept_once(item), "what was kept stays kept");
    }
}
