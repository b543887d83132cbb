//! `tollgate replay --plot OUT.svg`: the picture parsed as XML. Every
//! policy has its chart, named by its caption; each chart has its two
//! axes, its series (offered, admitted, the busiest identity), its
//! rejections with their retry-after, and its bound drawn as a level line
//! at the very figure `explain` states for it.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use support::tollgate_bin;

const CONFIG: &str = r#"
policies:
  - name: fixed
    algorithm: fixed_window
    limit: 10
    window: 10s
  - name: sliding
    algorithm: sliding_window
    limit: 10
    window: 10s
  - name: bucket
    algorithm: token_bucket
    capacity: 10
    refill: { tokens: 1, per: 1s }
  - name: log
    algorithm: sliding_log
    limit: 10
    window: 10s
  - name: watch
    algorithm: fixed_window
    limit: 5
    window: 10s
    mode: shadow
"#;

/// Each policy's caption, and the bound line's legend with explain's
/// figure over a span of the policy's length.
const CHARTS: [(&str, &str, &str); 5] = [
    (
        "fixed",
        "fixed: fixed_window limit 10 per 10s",
        "bound: any 10s span admits at most 20 per identity",
    ),
    (
        "sliding",
        "sliding: sliding_window limit 10 per 10s",
        "bound: any 10s span admits at most 19 per identity",
    ),
    (
        "bucket",
        "bucket: token_bucket capacity 10 refill 1 per 1s",
        "bound: any 1s span admits at most 11 per identity",
    ),
    (
        "log",
        "log: sliding_log limit 10 per 10s",
        "bound: any 10s span admits at most 10 per identity",
    ),
    (
        "watch",
        "watch: fixed_window limit 5 per 10s (shadow)",
        "bound: any 10s span admits at most 10 per identity",
    ),
];

/// A burst either side of a window boundary, then a steady 2 a second,
/// offered to every policy.
fn trace() -> String {
    let mut times: Vec<u64> = (0..10).map(|i| 9_900 + i).collect();
    times.extend((0..10).map(|i| 10_000 + i));
    times.extend((0..40).map(|i| 11_000 + 500 * i));
    let mut out = String::new();
    for t in times {
        for (policy, _, _) in CHARTS {
            out.push_str(&format!(
                "{{\"t_ms\": {t}, \"policy\": \"{policy}\", \"key\": \"alice\"}}\n"
            ));
        }
    }
    out
}

/// The text of every element of one chart, and its polylines' colour
/// and points, in document order.
#[derive(Default, Debug)]
struct Chart {
    texts: Vec<String>,
    /// (y of a tick label, its value)
    ticks: Vec<(f64, f64)>,
    lines: Vec<(String, Vec<(f64, f64)>)>,
    crosses: usize,
}

/// The picture's charts, each begun by its caption (the largest text).
fn charts(svg: &str) -> Vec<(String, Chart)> {
    let doc = roxmltree::Document::parse(svg).expect("the picture is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let mut charts: Vec<(String, Chart)> = Vec::new();
    for node in doc.descendants().filter(|n| n.is_element()) {
        let text = node.text().map(str::trim).unwrap_or_default().to_owned();
        match node.tag_name().name() {
            "text"
                if node
                    .attribute("font-size")
                    .and_then(|s| s.parse::<f64>().ok())
                    > Some(14.0) =>
            {
                charts.push((text, Chart::default()));
            }
            "text" => {
                let chart = &mut charts.last_mut().expect("a caption first").1;
                let anchored_end = node.attribute("text-anchor") == Some("end");
                if let (true, Ok(value), Some(y)) = (
                    anchored_end,
                    text.parse::<f64>(),
                    node.attribute("y").and_then(|y| y.parse().ok()),
                ) {
                    chart.ticks.push((y, value));
                }
                chart.texts.push(text);
            }
            "polyline" => {
                let points = node
                    .attribute("points")
                    .unwrap_or_default()
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').expect("x,y");
                        (x.parse().expect("x"), y.parse().expect("y"))
                    })
                    .collect();
                let stroke = node.attribute("stroke").unwrap_or_default().to_owned();
                if let Some((_, chart)) = charts.last_mut() {
                    chart.lines.push((stroke, points));
                }
            }
            "line" if node.attribute("stroke") == Some("#D62728") => {
                if let Some((_, chart)) = charts.last_mut() {
                    chart.crosses += 1;
                }
            }
            _ => {}
        }
    }
    charts
}

/// The y a value is drawn at, from two of the chart's tick labels.
fn y_of(chart: &Chart, value: f64) -> f64 {
    let (y0, v0) = chart.ticks[0];
    let (y1, v1) = chart.ticks[chart.ticks.len() - 1];
    y0 + (value - v0) * (y1 - y0) / (v1 - v0)
}

#[test]
fn every_policy_has_its_chart_with_axes_series_rejections_and_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let picture = dir.path().join("out.svg");
    let mut replay = Command::new(tollgate_bin())
        .args(["replay", "--summary", "--config"])
        .arg(&config)
        .arg("--plot")
        .arg(&picture)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate replay");
    let input = trace();
    replay
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("feed the trace");
    let out = replay.wait_with_output().expect("replay output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The picture draws the decisions replay printed.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 300);
    assert_eq!(
        stderr,
        "bucket: offered 60 (cost 60), admitted 30 (cost 30), rejected 30 (cost 30)\n\
         fixed: offered 60 (cost 60), admitted 32 (cost 32), rejected 28 (cost 28)\n\
         log: offered 60 (cost 60), admitted 22 (cost 22), rejected 38 (cost 38)\n\
         sliding: offered 60 (cost 60), admitted 29 (cost 29), rejected 31 (cost 31)\n\
         watch: offered 60 (cost 60), admitted 60 (cost 60), rejected 0 (cost 0), shadow: would have rejected 43 (cost 43)\n"
    );

    let svg = std::fs::read_to_string(&picture).expect("the picture");
    let charts = charts(&svg);
    let captions: Vec<&str> = charts.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(captions, CHARTS.map(|(_, caption, _)| caption));
    for ((caption, chart), (name, _, bound)) in charts.iter().zip(CHARTS) {
        let has = |prefix: &str| chart.texts.iter().filter(|t| t.starts_with(prefix)).count();
        assert_eq!(has("units"), 1, "{caption}: the y axis");
        assert_eq!(
            has("time since the first event (s)"),
            1,
            "{caption}: the x axis"
        );
        assert_eq!(has("offered (units in the trailing "), 1, "{caption}");
        assert_eq!(has("admitted (units in the trailing "), 1, "{caption}");
        assert_eq!(has("busiest identity: admitted in the "), 1, "{caption}");
        assert_eq!(has(bound), 1, "{caption}: {:?}", chart.texts);
        let rejected = if name == "watch" {
            "would have rejected (units), → its retry-after"
        } else {
            "rejected (units), → its retry-after"
        };
        assert_eq!(has(rejected), 1, "{caption}");
        // Offered and admitted as lines of many points.
        for colour in ["#4C72B0", "#2CA02C"] {
            assert!(
                chart
                    .lines
                    .iter()
                    .any(|(c, p)| c == colour && p.len() > 100),
                "{caption}: a {colour} series"
            );
        }
        // The bound: a level line across the chart at its figure.
        let figure: f64 = bound
            .split_whitespace()
            .nth(7)
            .and_then(|n| n.parse().ok())
            .expect("the bound's figure");
        let level = chart
            .lines
            .iter()
            .find(|(c, p)| c == "#7F7F7F" && p.len() == 2 && p[1].0 - p[0].0 > 500.0)
            .unwrap_or_else(|| panic!("{caption}: no bound line in {:?}", chart.lines));
        assert_eq!(level.1[0].1, level.1[1].1, "{caption}: level");
        assert!(
            (level.1[0].1 - y_of(chart, figure)).abs() <= 1.0,
            "{caption}: the bound {figure} drawn at y {} (ticks {:?})",
            level.1[0].1,
            chart.ticks
        );
        // Rejections are marked (a cross is two strokes), each with a
        // retry-after line from it.
        assert!(chart.crosses >= 4, "{caption}: {} crosses", chart.crosses);
        assert!(
            chart
                .lines
                .iter()
                .any(|(c, p)| c == "#D62728" && p.len() == 2 && p[1].0 > p[0].0),
            "{caption}: a retry-after mark"
        );
    }
}

#[test]
fn a_picture_that_cannot_be_written_stops_the_replay_before_it_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let picture = dir.path().join("no-such-dir").join("out.svg");
    let mut replay = Command::new(tollgate_bin())
        .args(["replay", "--config"])
        .arg(&config)
        .arg("--plot")
        .arg(&picture)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate replay");
    // The replay may stop before reading: a closed pipe is expected.
    let _ = replay
        .stdin
        .take()
        .expect("stdin")
        .write_all(trace().as_bytes());
    let out = replay.wait_with_output().expect("replay output");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stdout, b"", "nothing decided");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "tollgate: --plot {}: No such file or directory (os error 2)\n",
            picture.display()
        )
    );
}
