//! What `compare` prints: a table a policy (a line a side with
//! `--against`), then what changed; or the same as one JSON document.

use std::fmt::Write as _;

use serde_json::{Value, json};
use tollgate_core::format_duration_ms;

use super::{Change, Compared, Row, Side};

impl Compared {
    /// The summary table: per policy (and side), checks and cost offered,
    /// admitted and rejected, the most one identity was admitted in any
    /// span of the policy's length, its bound there, and how far below
    /// the bound that is (negative: over it); then, with `--against`, what
    /// the new config decided differently and for whom.
    pub fn table(&self) -> String {
        let mut lines = vec![
            [
                "policy",
                "config",
                "offered (cost)",
                "admitted (cost)",
                "rejected (cost)",
                "worst span",
                "bound",
                "below bound",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        let against = self.options.against.is_some();
        for row in &self.rows {
            let sides = [
                ("old", &row.before),
                (if against { "new" } else { "-" }, &row.side),
            ];
            for (which, side) in sides {
                if let Some(side) = side {
                    lines.push(cells(&row.policy, which, side));
                }
            }
        }
        let mut out = columns(&lines);
        out.push('\n');
        for row in &self.rows {
            let sides = [
                ("old", &row.before),
                (if against { "new" } else { "-" }, &row.side),
            ];
            for (which, side) in sides {
                if let Some(side) = side {
                    let _ = writeln!(out, "{}", notes(&row.policy, which, side));
                }
            }
        }
        for row in &self.rows {
            if let Some(change) = &row.change {
                out.push_str(&change_text(&row.policy, change));
            }
        }
        out
    }

    /// The same as JSON.
    pub fn json(&self) -> Value {
        let rows: Vec<Value> = self.rows.iter().map(row_json).collect();
        json!({
            "config": self.options.config.display().to_string(),
            "against": self.options.against.as_ref().map(|p| p.display().to_string()),
            "trace": self.options.trace.display().to_string(),
            "policies": rows,
        })
    }
}

/// One side's cells.
fn cells(policy: &str, which: &str, side: &Side) -> Vec<String> {
    let t = &side.tally;
    let (span, bound, below) = match side.bound {
        Some(b) => (
            format!("{} in {}", side.worst, format_duration_ms(b.span_ms)),
            b.at_most.to_string(),
            (i128::from(b.at_most) - i128::from(side.worst)).to_string(),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    vec![
        policy.to_owned(),
        which.to_owned(),
        format!("{} ({})", t.offered(), t.offered_cost()),
        format!("{} ({})", t.admitted, t.admitted_cost),
        format!("{} ({})", t.rejected, t.rejected_cost),
        span,
        bound,
        below,
    ]
}

/// The rows' cells in aligned columns.
fn columns(lines: &[Vec<String>]) -> String {
    let mut widths = vec![0; lines.first().map_or(0, Vec::len)];
    for line in lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in lines {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(&widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let _ = write!(text, "{cell:<width$}");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// What a side's table line does not say: the policy's limits, its
/// shadow mode and would-be rejections, its refunds.
fn notes(policy: &str, which: &str, side: &Side) -> String {
    let t = &side.tally;
    let mut text = match which {
        "-" => format!("{policy}: {}", side.limits),
        _ => format!("{policy} ({which}): {}", side.limits),
    };
    // `limits` starts with the name again: `api: token_bucket …`.
    if let Some(rest) = side
        .limits
        .strip_prefix(policy)
        .and_then(|r| r.strip_prefix(": "))
    {
        text = match which {
            "-" => format!("{policy}: {rest}"),
            _ => format!("{policy} ({which}): {rest}"),
        };
    }
    if t.shadow {
        let _ = write!(
            text,
            "; shadow: would have rejected {} (cost {})",
            t.would_reject, t.would_reject_cost
        );
    }
    if t.refunds > 0 {
        let _ = write!(
            text,
            "; refunded {} (units {})",
            t.refunds, t.refunded_units
        );
    }
    if side.not_followed() > 0 {
        let _ = write!(
            text,
            "; the worst span leaves out {} admissions of identities beyond the {} followed at once",
            side.not_followed(),
            crate::replay::MAX_WATCHED
        );
    }
    text
}

/// What the new config decided differently for `policy`.
fn change_text(policy: &str, change: &Change) -> String {
    let mut out = format!(
        "{policy}: the new config rejects {} (cost {}) the old admitted, and admits {} (cost {}) the old rejected\n",
        change.newly_rejected.0,
        change.newly_rejected.1,
        change.newly_admitted.0,
        change.newly_admitted.1
    );
    for (what, names) in [
        ("newly rejected", &change.rejected_identities),
        ("newly admitted", &change.admitted_identities),
    ] {
        if names.is_empty() {
            continue;
        }
        let listed: Vec<&str> = names.iter().map(String::as_str).collect();
        let _ = writeln!(out, "  {what}: {}", listed.join(" "));
    }
    if change.left_out > 0 {
        let _ = writeln!(
            out,
            "  and {} changed checks of identities beyond the {} named",
            change.left_out,
            super::MAX_NAMED
        );
    }
    out
}

fn side_json(side: &Side) -> Value {
    let t = &side.tally;
    let mut v = json!({
        "limits": side.limits,
        "shadow": side.shadow,
        "offered": {"checks": t.offered(), "cost": t.offered_cost()},
        "admitted": {"checks": t.admitted, "cost": t.admitted_cost},
        "rejected": {"checks": t.rejected, "cost": t.rejected_cost},
    });
    if t.shadow {
        v["would_reject"] = json!({"checks": t.would_reject, "cost": t.would_reject_cost});
    }
    if t.refunds > 0 {
        v["refunded"] = json!({"refunds": t.refunds, "units": t.refunded_units});
    }
    if let Some(b) = side.bound {
        v["worst_span"] = json!({
            "span_ms": b.span_ms,
            "both_ends": b.both_ends,
            "admitted": side.worst,
        });
        v["bound"] = json!({"any_span_at_most": b.at_most, "per_window": b.per_window});
        v["below_bound"] = json!(i128::from(b.at_most) - i128::from(side.worst));
        v["worst_span"]["admissions_not_followed"] = json!(side.not_followed());
    }
    v
}

fn row_json(row: &Row) -> Value {
    let mut v = json!({"policy": row.policy});
    if let Some(side) = &row.side {
        v[if row.change.is_some() {
            "new"
        } else {
            "decided"
        }] = side_json(side);
    }
    if let Some(side) = &row.before {
        v["old"] = side_json(side);
    }
    if let Some(change) = &row.change {
        v["change"] = json!({
            "newly_rejected": {"checks": change.newly_rejected.0, "cost": change.newly_rejected.1},
            "newly_admitted": {"checks": change.newly_admitted.0, "cost": change.newly_admitted.1},
            "newly_rejected_identities": change.rejected_identities,
            "newly_admitted_identities": change.admitted_identities,
            "changed_checks_not_named": change.left_out,
        });
    }
    v
}
