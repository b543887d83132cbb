//! The picture itself, drawn with plotters' SVG backend: one chart a
//! policy, stacked, each with its caption (the policy's name and limits),
//! axes, a legend naming each series, and its bound as level lines.

use plotters::prelude::*;
use tollgate_core::format_duration_ms;

use super::{Chart, Plot};
use crate::explain::describe_policy;

/// The picture's width, and each chart's height, in pixels.
const WIDTH: u32 = 960;
const CHART_HEIGHT: u32 = 360;

const OFFERED: RGBColor = RGBColor(0x4c, 0x72, 0xb0);
const ADMITTED: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const BUSIEST: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
const REJECTED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const BOUND: RGBColor = RGBColor(0x7f, 0x7f, 0x7f);
const PER_WINDOW: RGBColor = RGBColor(0x94, 0x67, 0xbd);

/// `plot` as an SVG document; a chart that cannot be drawn says why in
/// its place rather than leave the picture half made.
pub(super) fn svg(plot: &Plot) -> String {
    let mut out = String::new();
    let charts = plot.charts.len().max(1);
    let height = CHART_HEIGHT.saturating_mul(u32::try_from(charts).unwrap_or(u32::MAX));
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let areas = root.split_evenly((charts, 1));
        for (area, chart) in areas.iter().zip(&plot.charts) {
            if let Err(e) = draw_chart(area, chart, plot) {
                let _ = area.draw_text(
                    &format!("{}: not drawn: {e}", chart.label),
                    &("sans-serif", 16).into_font().color(&BLACK),
                    (20, 20),
                );
            }
        }
        let _ = root.present();
    }
    out
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Fault = Box<dyn std::error::Error + 'static>;

/// One policy's chart on `area`.
fn draw_chart(area: &Area<'_>, chart: &Chart, plot: &Plot) -> Result<(), Fault> {
    let width = plot.width_ms;
    let seconds = |bin: usize| (bin as f64 * width as f64) / 1000.0;
    let x_end = seconds(chart.bins.len().max(1));
    let bound = chart.bound;
    let span_bins = bound.map_or(1, |b| (b.span_ms / width).max(1));
    let top = trailing(chart, span_bins, |b| b.offered)
        .into_iter()
        .chain(chart.bins.iter().map(|b| b.busiest))
        .chain(bound.map(|b| b.at_most))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        // Room above the data for the legend.
        * 1.6;
    let mode = if chart.shadow { " (shadow)" } else { "" };
    let prefix = chart
        .label
        .strip_suffix(chart.policy.name())
        .unwrap_or_default();
    let mut cartesian = ChartBuilder::on(area)
        .caption(
            format!("{prefix}{}{mode}", describe_policy(&chart.policy)),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_end, 0f64..top)?;
    cartesian
        .configure_mesh()
        // The bold lines at each label only: a light line between every
        // two would make the file several times larger.
        .max_light_lines(0)
        .x_desc("time since the first event (s)")
        .y_desc("units")
        .draw()?;
    // Offered and admitted over the trailing span of the policy's length
    // (whole bins), so they read on the bound's scale.
    let span_bins = bound.map_or(1, |b| (b.span_ms / width).max(1));
    let per = if span_bins > 1 {
        format!(
            "units in the trailing {}",
            format_duration_ms(span_bins * width)
        )
    } else {
        format!("units per {}", format_duration_ms(width))
    };
    let offered = trailing(chart, span_bins, |b| b.offered);
    let admitted = trailing(chart, span_bins, |b| b.admitted);
    let points = |sums: Vec<u64>| {
        sums.into_iter()
            .enumerate()
            .map(|(i, units)| (seconds(i), units as f64))
            .collect::<Vec<_>>()
    };
    cartesian
        .draw_series(LineSeries::new(points(offered), OFFERED.stroke_width(2)))?
        .label(format!("offered ({per})"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OFFERED.stroke_width(2)));
    cartesian
        .draw_series(LineSeries::new(points(admitted), ADMITTED.stroke_width(2)))?
        .label(format!("admitted ({per})"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], ADMITTED.stroke_width(2)));
    if let Some(bound) = bound {
        draw_bound(&mut cartesian, chart, bound, (x_end, &seconds))?;
    }
    draw_rejections(&mut cartesian, chart, &seconds)?;
    cartesian
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Each bin's `pick` summed over the `span` bins ending with it.
fn trailing(chart: &Chart, span: u64, pick: fn(&super::Bin) -> u64) -> Vec<u64> {
    let span = usize::try_from(span).unwrap_or(usize::MAX);
    let mut sums = Vec::with_capacity(chart.bins.len());
    let mut sum = 0u64;
    for (i, bin) in chart.bins.iter().enumerate() {
        sum = sum.saturating_add(pick(bin));
        if let Some(left) = i.checked_sub(span) {
            sum = sum.saturating_sub(pick(&chart.bins[left]));
        }
        sums.push(sum);
    }
    sums
}

type Cartesian<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The busiest identity's admissions in any span of the policy's length,
/// and the bound they stay under: its figure over such a span, and the
/// limit per window (a bucket's burst).
fn draw_bound(
    cartesian: &mut Cartesian<'_, '_>,
    chart: &Chart,
    bound: crate::explain::SpanBound,
    (x_end, seconds): (f64, &dyn Fn(usize) -> f64),
) -> Result<(), Fault> {
    let span = format_duration_ms(bound.span_ms);
    cartesian
        .draw_series(
            chart
                .bins
                .iter()
                .enumerate()
                .filter(|(_, b)| b.busiest > 0)
                .map(|(i, b)| Circle::new((seconds(i), b.busiest as f64), 3, BUSIEST.filled())),
        )?
        .label(format!(
            "busiest identity: admitted in the {span} span ending then"
        ))
        .legend(|(x, y)| Circle::new((x + 10, y), 3, BUSIEST.filled()));
    let level = |y: u64| vec![(0.0, y as f64), (x_end, y as f64)];
    cartesian
        .draw_series(LineSeries::new(level(bound.at_most), BOUND.stroke_width(2)))?
        .label(format!(
            "bound: any {span} span admits at most {} per identity",
            bound.at_most
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BOUND.stroke_width(2)));
    if bound.per_window != bound.at_most {
        let what = if bound.both_ends {
            format!("bound: burst {}", bound.per_window)
        } else {
            format!("bound: {} per aligned {span} window", bound.per_window)
        };
        cartesian
            .draw_series(LineSeries::new(level(bound.per_window), PER_WINDOW))?
            .label(what)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PER_WINDOW));
    }
    Ok(())
}

/// Each bin's rejected units as a cross, with a line from it as long as
/// the longest retry-after among them (a circle: a cost never admitted).
fn draw_rejections(
    cartesian: &mut Cartesian<'_, '_>,
    chart: &Chart,
    seconds: &dyn Fn(usize) -> f64,
) -> Result<(), Fault> {
    let rejected: Vec<(f64, f64, Option<u64>, bool)> = chart
        .bins
        .iter()
        .enumerate()
        .filter(|(_, b)| b.rejected > 0)
        .map(|(i, b)| (seconds(i), b.rejected as f64, b.retry_after_ms, b.never))
        .collect();
    let what = if chart.shadow {
        "would have rejected (units), → its retry-after"
    } else {
        "rejected (units), → its retry-after"
    };
    cartesian
        .draw_series(
            rejected
                .iter()
                .map(|&(x, y, _, _)| Cross::new((x, y), 5, REJECTED.stroke_width(2))),
        )?
        .label(what)
        .legend(|(x, y)| Cross::new((x + 10, y), 5, REJECTED.stroke_width(2)));
    cartesian.draw_series(rejected.iter().filter_map(|&(x, y, retry, _)| {
        let ms = retry.filter(|&ms| ms > 0)?;
        Some(PathElement::new(
            vec![(x, y), (x + ms as f64 / 1000.0, y)],
            REJECTED,
        ))
    }))?;
    cartesian.draw_series(
        rejected
            .iter()
            .filter(|r| r.3)
            .map(|&(x, y, _, _)| Circle::new((x, y), 6, REJECTED)),
    )?;
    Ok(())
}
