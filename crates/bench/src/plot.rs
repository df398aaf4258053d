//! A latency-over-time picture of a benchmark run, as a self-contained SVG document,
//! drawn with plotters' SVG backend.
//!
//! Every operation is a dot at (start time, latency) on a log latency scale, failures
//! are red crosses, a dark line follows the p99 of each second, and the rollout's steps
//! are dashed vertical lines, labelled and colored by kind. Dots are drawn once per
//! occupied pixel bucket rather than once per operation: the file size is then bounded
//! by the plot's pixel count however long the run, and an outlier, alone in its bucket,
//! is never thinned away. The output depends only on the input (ordered maps, no
//! clocks, no randomness), so two renders of one run are byte-identical.
//!
//! plotters is built without its `ttf` feature: it then lays text out with a built-in
//! estimate of glyph widths instead of loading system fonts, which an SVG viewer
//! renders with its own fonts anyway.

use anyhow::Result;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;

/// One client operation as the picture shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOp {
    /// Start, ms since the workload began.
    pub at_ms: i64,
    /// Time until the reply; for a failed operation, the time until the error.
    pub latency_ms: f64,
    pub failed: bool,
}

/// A rollout step to mark: a vertical line with a short label.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotStep {
    pub at_ms: i64,
    pub label: String,
    /// What kind of step it is (its color); typed by the caller, never read from the label.
    pub kind: StepKind,
}

// The canvas, and the plot area inside it. The right margin holds the legend, so the
// legend never covers data or step labels.
const WIDTH_PX: u32 = 1200;
const HEIGHT_PX: u32 = 520;
const PLOT_LEFT_PX: i32 = 72;
const PLOT_RIGHT_PX: i32 = 1000;
const PLOT_TOP_PX: i32 = 64;
const PLOT_BOTTOM_PX: i32 = 460;
/// The legend's left edge; it hangs from the plot area's top.
const LEGEND_LEFT_PX: i32 = 1016;
/// Room left of the latency axis's title and below the time axis's.
const OUTER_MARGIN_PX: i32 = 10;

/// plotters' SVG backend writes a font size as the style's size divided by this, so
/// sizes below are given in CSS px and multiplied by it.
const SVG_FONT_SCALE: f64 = 1.24;
const TITLE_FONT_PX: f64 = 17.0;
const SUBTITLE_FONT_PX: f64 = 12.0;
const AXIS_TITLE_FONT_PX: f64 = 12.0;
const TICK_FONT_PX: f64 = 11.0;
const STEP_FONT_PX: f64 = 10.0;

/// Bottom of the latency axis; anything faster is drawn here.
const FLOOR_MS: f64 = 0.1;
/// The latency axis reaches at least the decade above this (a client timeout of 2 s
/// stays inside the picture), so runs are comparable at a glance.
const MIN_TOP_MS: f64 = 2_000.0;
/// A cap on the axis, so one absurd latency cannot squash the picture into a line.
const MAX_TOP_MS: f64 = 1e6;
/// What a missing or non-positive duration is taken to be.
const DEFAULT_DURATION_MS: i64 = 1_000;

/// Bucket edge for successful operations: a dot is 2 px across, so 2 px buckets lose
/// nothing visible while bounding the dot count by the plot's area.
const OK_BUCKET_PX: i32 = 3;
const OK_DOT_RADIUS_PX: i32 = 2;
/// Failures are drawn as 7 px crosses; coarser buckets keep a storm of them legible.
const FAILED_BUCKET_PX: i32 = 4;
const FAILED_CROSS_HALF_PX: i32 = 3;
/// Opacity by how many operations a bucket holds (at least the first number), so dense
/// regions read darker even though each bucket is drawn once.
const OK_DENSITY_LEVELS: [(u32, f64); 3] = [(1, 0.4), (3, 0.6), (10, 0.85)];

const OK_COLOR: RGBColor = RGBColor(0x46, 0x82, 0xb4);
const FAILED_COLOR: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const P99_COLOR: RGBColor = RGBColor(0x22, 0x22, 0x22);
const GRID_COLOR: RGBColor = RGBColor(0xe6, 0xe6, 0xe6);
const MINOR_GRID_COLOR: RGBColor = RGBColor(0xf4, 0xf4, 0xf4);
const AXIS_COLOR: RGBColor = RGBColor(0x44, 0x44, 0x44);
const LEGEND_BORDER_COLOR: RGBColor = RGBColor(0xcc, 0xcc, 0xcc);
const NO_DATA_COLOR: RGBColor = RGBColor(0x88, 0x88, 0x88);

/// At most this many labelled time ticks (plotters picks round intervals).
const MAX_X_TICKS: usize = 15;
/// Windows for the p99 line: one second unless that would make more points than the
/// plot has room for.
const P99_WINDOWS_MS: [i64; 6] = [1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
const MAX_P99_POINTS: i64 = 600;

/// Step labels are 10 px text set on end; this is the least distance between two of
/// them before the later one is moved right to stay readable.
const STEP_LABEL_GAP_PX: i32 = 12;
/// Step lines: dashes of this length, with this gap.
const STEP_DASH_PX: i32 = 5;
const STEP_DASH_GAP_PX: i32 = 3;

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type LatencyChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, WithKeyPoints<LogCoord<f64>>>>;

/// Renders the SVG document. `title` goes on top; `subtitle` (e.g. the summary: failed
/// ops, p99, max) below it.
pub fn latency_svg(
    title: &str,
    subtitle: &str,
    ops: &[PlotOp],
    steps: &[PlotStep],
    duration_ms: i64,
) -> Result<String> {
    let frame = Frame::new(ops, duration_ms);
    let mut steps: Vec<&PlotStep> = steps.iter().collect();
    // Stable: steps at the same instant keep the caller's order.
    steps.sort_by_key(|s| s.at_ms);
    let mut out = String::with_capacity(256 * 1024);
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE)?;
        draw_titles(&root, title, subtitle)?;
        let mut chart = build_chart(&root, &frame)?;
        // Back to front: grid and step lines under the data, step labels over the dots
        // (their halo keeps them legible), failures over everything so no label hides one.
        draw_step_lines(&mut chart, &frame, &steps)?;
        draw_ok_dots(&root, &chart, &frame, ops)?;
        let p99_window_ms = p99_window_ms(frame.duration_ms);
        draw_p99_line(&mut chart, &frame, ops, p99_window_ms)?;
        if ops.is_empty() {
            draw_no_data(&root)?;
        }
        draw_step_labels(&root, &chart, &frame, &steps)?;
        draw_failures(&root, &chart, &frame, ops)?;
        draw_legend(&root, &steps, p99_window_ms)?;
        root.present()?;
    }
    Ok(out)
}

/// The scales' extent: the run's duration and the top of the latency axis.
struct Frame {
    duration_ms: i64,
    /// Top of the latency axis, a power of ten.
    top_ms: f64,
}

impl Frame {
    fn new(ops: &[PlotOp], duration_ms: i64) -> Frame {
        let duration_ms = if duration_ms > 0 {
            duration_ms
        } else {
            DEFAULT_DURATION_MS
        };
        let max_ms = ops
            .iter()
            .map(|o| o.latency_ms)
            .filter(|l| l.is_finite())
            .fold(MIN_TOP_MS, f64::max)
            .min(MAX_TOP_MS);
        Frame {
            duration_ms,
            top_ms: decade_at_or_above(max_ms),
        }
    }

    /// A point in chart coordinates (seconds, ms). Times outside the run are drawn at
    /// its nearest edge; NaN and latencies below the floor on the floor, above the top
    /// on the top, so nothing escapes the plot area.
    fn point(&self, at_ms: i64, latency_ms: f64) -> (f64, f64) {
        let at_ms = at_ms.clamp(0, self.duration_ms);
        let latency_ms = if latency_ms.is_nan() {
            FLOOR_MS
        } else {
            latency_ms.clamp(FLOOR_MS, self.top_ms)
        };
        (at_ms as f64 / 1000.0, latency_ms)
    }

    fn duration_s(&self) -> f64 {
        self.duration_ms as f64 / 1000.0
    }
}

/// The smallest power of ten at or above `ms` (at least 1).
fn decade_at_or_above(ms: f64) -> f64 {
    10f64.powi(ms.max(1.0).log10().ceil() as i32)
}

/// A font of `px` CSS pixels.
fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(
        FontFamily::SansSerif,
        px * SVG_FONT_SCALE,
        FontStyle::Normal,
    )
}

fn draw_titles(root: &Area<'_>, title: &str, subtitle: &str) -> Result<()> {
    let bold = font(TITLE_FONT_PX).style(FontStyle::Bold);
    root.draw(&Text::new(clean(title), (PLOT_LEFT_PX, 12), bold))?;
    let small = font(SUBTITLE_FONT_PX).color(&AXIS_COLOR);
    root.draw(&Text::new(clean(subtitle), (PLOT_LEFT_PX, 36), small))?;
    Ok(())
}

/// The axes: time in seconds, latency on a log scale labelled at each decade, with a
/// light line at 2..9 of each decade to show that the scale is logarithmic.
fn build_chart<'a, 'b>(root: &'a Area<'b>, frame: &Frame) -> Result<LatencyChart<'a, 'b>> {
    let decades: Vec<f64> = decades(frame.top_ms).map(|d| 10f64.powi(d)).collect();
    let minors: Vec<f64> = decades
        .iter()
        .filter(|&&base| base < frame.top_ms)
        .flat_map(|&base| (2..10).map(move |m| base * f64::from(m)))
        .collect();
    let latency = (FLOOR_MS..frame.top_ms)
        .log_scale()
        .with_key_points(decades)
        .with_light_points(minors);
    let mut chart = ChartBuilder::on(root)
        .margin_top(PLOT_TOP_PX)
        .margin_right(WIDTH_PX as i32 - PLOT_RIGHT_PX)
        .margin_left(OUTER_MARGIN_PX)
        .margin_bottom(OUTER_MARGIN_PX)
        .x_label_area_size(HEIGHT_PX as i32 - PLOT_BOTTOM_PX - OUTER_MARGIN_PX)
        .y_label_area_size(PLOT_LEFT_PX - OUTER_MARGIN_PX)
        .build_cartesian_2d(0.0..frame.duration_s(), latency)?;
    let seconds = |s: &f64| {
        if s.fract() == 0.0 {
            format!("{s:.0}")
        } else {
            format!("{s:.1}")
        }
    };
    let decade_label = |ms: &f64| decade_label(ms.log10().round() as i32);
    chart
        .configure_mesh()
        .x_labels(MAX_X_TICKS)
        .x_max_light_lines(0)
        .x_label_formatter(&seconds)
        .y_label_formatter(&decade_label)
        .bold_line_style(GRID_COLOR)
        .light_line_style(MINOR_GRID_COLOR)
        .axis_style(AXIS_COLOR)
        .label_style(font(TICK_FONT_PX).color(&AXIS_COLOR))
        .axis_desc_style(font(AXIS_TITLE_FONT_PX).color(&AXIS_COLOR))
        .x_desc("time since the workload started (s)")
        .y_desc("latency (ms)")
        .draw()?;
    Ok(chart)
}

/// Decade exponents from the floor to the top of the latency axis.
fn decades(top_ms: f64) -> std::ops::RangeInclusive<i32> {
    FLOOR_MS.log10().round() as i32..=top_ms.log10().round() as i32
}

/// A decade's tick label: "0.1", "1", "10", ... without exponent notation.
fn decade_label(decade: i32) -> String {
    if decade < 0 {
        format!("0.{}1", "0".repeat((-decade - 1) as usize))
    } else {
        format!("1{}", "0".repeat(decade as usize))
    }
}

/// Operations per occupied bucket, keyed by the bucket's (column, row) on the canvas.
/// Ordered, so the drawing order (hence the output) is deterministic.
fn buckets<'a>(
    chart: &LatencyChart<'_, '_>,
    frame: &Frame,
    ops: impl Iterator<Item = &'a PlotOp>,
    bucket_px: i32,
) -> BTreeMap<(i32, i32), u32> {
    let mut counts = BTreeMap::new();
    for op in ops {
        let (x, y) = chart.backend_coord(&frame.point(op.at_ms, op.latency_ms));
        let bucket = (x.div_euclid(bucket_px), y.div_euclid(bucket_px));
        *counts.entry(bucket).or_insert(0) += 1;
    }
    counts
}

/// The centre of a bucket, in px.
fn bucket_centre_px((column, row): (i32, i32), bucket_px: i32) -> (i32, i32) {
    (
        column * bucket_px + bucket_px / 2,
        row * bucket_px + bucket_px / 2,
    )
}

/// Successful operations: one dot per occupied bucket, darker where a bucket holds more.
fn draw_ok_dots(
    root: &Area<'_>,
    chart: &LatencyChart<'_, '_>,
    frame: &Frame,
    ops: &[PlotOp],
) -> Result<()> {
    let counts = buckets(chart, frame, ops.iter().filter(|o| !o.failed), OK_BUCKET_PX);
    for (&bucket, &count) in &counts {
        let opacity = OK_DENSITY_LEVELS
            .iter()
            .rev()
            .find(|(min_count, _)| count >= *min_count)
            .map_or(1.0, |&(_, opacity)| opacity);
        let centre = bucket_centre_px(bucket, OK_BUCKET_PX);
        let style = OK_COLOR.mix(opacity).filled();
        root.draw(&Circle::new(centre, OK_DOT_RADIUS_PX, style))?;
    }
    Ok(())
}

/// Failed operations: always drawn (bucketed only to bound the size), as red crosses
/// over the dots and the p99 line so they stand out.
fn draw_failures(
    root: &Area<'_>,
    chart: &LatencyChart<'_, '_>,
    frame: &Frame,
    ops: &[PlotOp],
) -> Result<()> {
    let counts = buckets(
        chart,
        frame,
        ops.iter().filter(|o| o.failed),
        FAILED_BUCKET_PX,
    );
    let style = FAILED_COLOR.stroke_width(2);
    for &bucket in counts.keys() {
        let centre = bucket_centre_px(bucket, FAILED_BUCKET_PX);
        root.draw(&Cross::new(centre, FAILED_CROSS_HALF_PX, style))?;
    }
    Ok(())
}

/// The window for the p99 line: a second, or coarser on long runs.
fn p99_window_ms(duration_ms: i64) -> i64 {
    P99_WINDOWS_MS
        .iter()
        .copied()
        .find(|w| duration_ms / w <= MAX_P99_POINTS)
        .unwrap_or_else(|| duration_ms / MAX_P99_POINTS + 1)
}

/// The p99 latency of the successful operations started in each window; None for a
/// window without one.
fn p99_by_window(frame: &Frame, ops: &[PlotOp], window_ms: i64) -> Vec<Option<f64>> {
    // Rounded up without `duration + window - 1`, which could overflow.
    let windows = frame.duration_ms / window_ms + i64::from(frame.duration_ms % window_ms != 0);
    let mut latencies_ms: Vec<Vec<f64>> = vec![Vec::new(); windows.max(1) as usize];
    let last = latencies_ms.len() - 1;
    for op in ops.iter().filter(|o| !o.failed) {
        let at_ms = op.at_ms.clamp(0, frame.duration_ms);
        let index = ((at_ms / window_ms) as usize).min(last);
        let latency_ms = if op.latency_ms.is_nan() {
            FLOOR_MS
        } else {
            op.latency_ms
        };
        latencies_ms[index].push(latency_ms);
    }
    latencies_ms
        .into_iter()
        .map(|mut window| {
            if window.is_empty() {
                return None;
            }
            window.sort_by(f64::total_cmp);
            // Nearest rank, as the bench report computes its percentiles.
            let rank = ((window.len() - 1) as f64 * 0.99).round() as usize;
            window.get(rank).copied()
        })
        .collect()
}

/// The p99 line, a point at the middle of each window. A window with no successful
/// operation breaks the line rather than being bridged: that gap is an outage and
/// should look like one. A lone window is a dot.
fn draw_p99_line(
    chart: &mut LatencyChart<'_, '_>,
    frame: &Frame,
    ops: &[PlotOp],
    window_ms: i64,
) -> Result<()> {
    let p99s = p99_by_window(frame, ops, window_ms);
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (index, p99_ms) in p99s.iter().enumerate() {
        let Some(run) = runs.last_mut() else { break };
        match p99_ms {
            Some(p99_ms) => {
                let start_ms = index as i64 * window_ms;
                let end_ms = start_ms.saturating_add(window_ms).min(frame.duration_ms);
                run.push(frame.point((start_ms + end_ms) / 2, *p99_ms));
            }
            None if run.is_empty() => {}
            None => runs.push(Vec::new()),
        }
    }
    let style = P99_COLOR.stroke_width(2);
    for run in runs {
        match run.as_slice() {
            [] => {}
            [lone] => {
                chart.draw_series([Circle::new(*lone, 1, P99_COLOR.filled())])?;
            }
            _ => {
                chart.draw_series(LineSeries::new(run, style))?;
            }
        }
    }
    Ok(())
}

/// Step kinds, each with its own color.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    Learner,
    /// A machine started: a new member, or one restarted in place.
    Start,
    Promote,
    MoveLeader,
    Remove,
    Stop,
    Other,
}

impl StepKind {
    /// Legend order: the order a member replacement goes through them.
    const ALL: [StepKind; 7] = [
        StepKind::Learner,
        StepKind::Start,
        StepKind::Promote,
        StepKind::MoveLeader,
        StepKind::Remove,
        StepKind::Stop,
        StepKind::Other,
    ];

    fn color(self) -> RGBColor {
        match self {
            StepKind::Learner => RGBColor(0x2c, 0xa0, 0x2c),
            StepKind::Start => RGBColor(0x17, 0xbe, 0xcf),
            StepKind::Promote => RGBColor(0x94, 0x67, 0xbd),
            StepKind::MoveLeader => RGBColor(0xff, 0x7f, 0x0e),
            StepKind::Remove => RGBColor(0x8c, 0x56, 0x4b),
            StepKind::Stop => RGBColor(0xe3, 0x77, 0xc2),
            StepKind::Other => RGBColor(0x7f, 0x7f, 0x7f),
        }
    }

    fn name(self) -> &'static str {
        match self {
            StepKind::Learner => "add learner",
            StepKind::Start => "start machine",
            StepKind::Promote => "promote",
            StepKind::MoveLeader => "move leader",
            StepKind::Remove => "remove member",
            StepKind::Stop => "stop machine",
            StepKind::Other => "other step",
        }
    }
}

/// A dashed line per step, under the data.
fn draw_step_lines(
    chart: &mut LatencyChart<'_, '_>,
    frame: &Frame,
    steps: &[&PlotStep],
) -> Result<()> {
    for step in steps {
        let style = step.kind.color().stroke_width(1);
        let bottom = frame.point(step.at_ms, FLOOR_MS);
        let top = frame.point(step.at_ms, frame.top_ms);
        chart.draw_series(DashedLineSeries::new(
            [bottom, top],
            STEP_DASH_PX,
            STEP_DASH_GAP_PX,
            style,
        ))?;
    }
    Ok(())
}

/// Where each step's label goes (its baseline's x), in step order. A label sits just
/// left of its line; one that would overlap the previous label moves right just enough
/// not to, so a burst of steps stays readable (the color ties it to its line).
fn step_label_xs_px(line_xs_px: &[i32]) -> Vec<i32> {
    let mut previous_px = i32::MIN / 2;
    line_xs_px
        .iter()
        .map(|line_px| {
            let x = (line_px - 2).max(previous_px + STEP_LABEL_GAP_PX);
            previous_px = x;
            x
        })
        .collect()
}

/// Labels on end, reading upward and hanging from the top of the plot. plotters' text
/// has no outline, so a halo that keeps a label legible over dots is the same text in
/// bold white, drawn first one pixel off in each diagonal.
fn draw_step_labels(
    root: &Area<'_>,
    chart: &LatencyChart<'_, '_>,
    frame: &Frame,
    steps: &[&PlotStep],
) -> Result<()> {
    let line_xs: Vec<i32> = steps
        .iter()
        .map(|s| chart.backend_coord(&frame.point(s.at_ms, frame.top_ms)).0)
        .collect();
    let top = PLOT_TOP_PX + 4;
    let on_end = |color: &RGBColor, style: FontStyle| {
        font(STEP_FONT_PX)
            .style(style)
            .transform(FontTransform::Rotate270)
            .color(color)
            .pos(Pos::new(HPos::Right, VPos::Bottom))
    };
    for (step, x) in steps.iter().zip(step_label_xs_px(&line_xs)) {
        let label = clean(&step.label);
        for (dx, dy) in [(-1, -1), (1, -1), (-1, 1), (1, 1)] {
            let halo = on_end(&WHITE, FontStyle::Bold);
            root.draw(&Text::new(label.as_str(), (x + dx, top + dy), halo))?;
        }
        let color = step.kind.color();
        let text = on_end(&color, FontStyle::Normal);
        root.draw(&Text::new(label.as_str(), (x, top), text))?;
    }
    Ok(())
}

/// Says so, rather than leaving an empty frame that looks like a rendering bug.
fn draw_no_data(root: &Area<'_>) -> Result<()> {
    let style = font(14.0)
        .color(&NO_DATA_COLOR)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let centre = (
        (PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2,
        (PLOT_TOP_PX + PLOT_BOTTOM_PX) / 2,
    );
    root.draw(&Text::new("no operations", centre, style))?;
    Ok(())
}

/// The legend, right of the plot: the three data marks, then the step kinds present.
/// plotters draws series labels inside a chart's plotting area, so the legend is a
/// chart of its own with nothing plotted, whose series are empty and only carry their
/// label and sample mark (drawn from the left end of a 30 px slot).
fn draw_legend(root: &Area<'_>, steps: &[&PlotStep], p99_window_ms: i64) -> Result<()> {
    let area = root.margin(PLOT_TOP_PX, 0, LEGEND_LEFT_PX, OUTER_MARGIN_PX);
    let mut legend = ChartBuilder::on(&area).build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
    let none = std::iter::empty::<EmptyElement<(f64, f64), SVGBackend>>;
    legend
        .draw_series(none())?
        .label("ok operation")
        .legend(|(x, y)| Circle::new((x + 9, y), 2, OK_COLOR.mix(0.8).filled()));
    legend
        .draw_series(none())?
        .label("failed operation")
        .legend(|(x, y)| {
            Cross::new(
                (x + 9, y),
                FAILED_CROSS_HALF_PX,
                FAILED_COLOR.stroke_width(2),
            )
        });
    legend
        .draw_series(none())?
        .label(p99_label(p99_window_ms))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], P99_COLOR.stroke_width(2)));
    let kinds: Vec<StepKind> = StepKind::ALL
        .into_iter()
        .filter(|kind| steps.iter().any(|s| s.kind == *kind))
        .collect();
    if !kinds.is_empty() {
        legend
            .draw_series(none())?
            .label("rollout steps")
            .legend(EmptyElement::at);
    }
    for kind in kinds {
        legend
            .draw_series(none())?
            .label(kind.name())
            .legend(move |(x, y)| {
                let style = kind.color().stroke_width(1);
                DashedPathElement::new([(x, y), (x + 18, y)], STEP_DASH_PX, STEP_DASH_GAP_PX, style)
            });
    }
    legend
        .configure_series_labels()
        .position(SeriesLabelPosition::Coordinate(0, 0))
        .margin(8)
        .legend_area_size(24)
        .label_font(font(TICK_FONT_PX))
        .background_style(WHITE)
        .border_style(LEGEND_BORDER_COLOR)
        .draw()?;
    Ok(())
}

fn p99_label(window_ms: i64) -> String {
    if window_ms == 1_000 {
        "p99 per second".to_string()
    } else {
        format!("p99 per {} s", window_ms as f64 / 1000.0)
    }
}

/// Text as XML 1.0 can hold it: plotters escapes markup, but control characters are
/// not allowed at all (even escaped), so a stray byte in an error message becomes
/// U+FFFD, and line breaks and tabs a space.
fn clean(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => ' ',
            c if c.is_control() => '\u{FFFD}',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests;
