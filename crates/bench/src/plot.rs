//! A latency-over-time picture of a benchmark run, as a self-contained SVG document.
//!
//! Every operation is a dot at (start time, latency) on a log latency scale, failures
//! are red crosses, a dark line follows the p99 of each second, and the rollout's steps
//! are dashed vertical lines. Dots are drawn once per occupied pixel bucket rather than
//! once per operation: the file size is then bounded by the plot's pixel count however
//! long the run, and an outlier, alone in its bucket, is never thinned away. The output
//! depends only on the input (ordered maps, no clocks, no randomness), so two renders of
//! one run are byte-identical.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

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
}

// The canvas, and the plot area inside it. The right margin holds the legend, so the
// legend never covers data or step labels.
const WIDTH_PX: f64 = 1200.0;
const HEIGHT_PX: f64 = 520.0;
const PLOT_LEFT_PX: f64 = 72.0;
const PLOT_RIGHT_PX: f64 = 1000.0;
const PLOT_TOP_PX: f64 = 64.0;
const PLOT_BOTTOM_PX: f64 = 460.0;
const LEGEND_LEFT_PX: f64 = 1016.0;

/// Bottom of the latency axis; anything faster is drawn here.
const FLOOR_MS: f64 = 0.1;
/// The latency axis reaches at least the decade above this (a client timeout of 2 s
/// stays inside the picture), so runs are comparable at a glance.
const MIN_TOP_MS: f64 = 2_000.0;
/// A cap on the axis, so one absurd latency cannot squash the picture into a line.
const MAX_TOP_MS: f64 = 1e6;
/// What a missing or non-positive duration is taken to be.
const DEFAULT_DURATION_MS: i64 = 1_000;

/// Bucket edge for successful operations: a dot is 3 px across, so 2 px buckets lose
/// nothing visible while bounding the dot count by the plot's area.
const OK_BUCKET_PX: f64 = 2.0;
/// Failures are drawn as 7 px crosses; coarser buckets keep a storm of them legible.
const FAILED_BUCKET_PX: f64 = 4.0;
/// Opacity by how many operations a bucket holds (at least the first number), so dense
/// regions read darker even though each bucket is drawn once.
const OK_DENSITY_LEVELS: [(u32, f64); 3] = [(1, 0.4), (3, 0.6), (10, 0.85)];

const OK_COLOR: &str = "steelblue";
const FAILED_COLOR: &str = "#d62728";
const P99_COLOR: &str = "#222";
const GRID_COLOR: &str = "#e6e6e6";
const AXIS_COLOR: &str = "#444";

/// Round tick intervals for the time axis; the smallest giving at most this many
/// ticks wins (which leaves at least 6).
const X_TICK_STEPS_MS: [i64; 17] = [
    100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000, 600_000,
    1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
const MAX_X_TICKS: i64 = 15;
/// Windows for the p99 line: one second unless that would make more points than the
/// plot has room for.
const P99_WINDOWS_MS: [i64; 6] = [1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
const MAX_P99_POINTS: i64 = 600;

/// Step labels are 10 px text set on end; this is the least distance between two of
/// them before the later one is moved right to stay readable.
const STEP_LABEL_GAP_PX: f64 = 12.0;

/// Renders the SVG document. `title` goes on top; `subtitle` (e.g. the summary: failed
/// ops, p99, max) below it.
pub fn latency_svg(
    title: &str,
    subtitle: &str,
    ops: &[PlotOp],
    steps: &[PlotStep],
    duration_ms: i64,
) -> String {
    let frame = Frame::new(ops, duration_ms);
    let mut steps: Vec<&PlotStep> = steps.iter().collect();
    // Stable: steps at the same instant keep the caller's order.
    steps.sort_by_key(|s| s.at_ms);

    let mut out = String::with_capacity(64 * 1024);
    push(
        &mut out,
        format_args!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n\
             <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n",
            w = num(WIDTH_PX),
            h = num(HEIGHT_PX),
        ),
    );
    // Back to front: grid and step lines under the data, step labels over the dots
    // (their halo keeps them legible), failures over everything so no label hides one.
    draw_grid(&mut out, &frame);
    draw_step_lines(&mut out, &frame, &steps);
    draw_ok_dots(&mut out, &frame, ops);
    let p99_window_ms = p99_window_ms(frame.duration_ms);
    draw_p99_line(&mut out, &frame, ops, p99_window_ms);
    if ops.is_empty() {
        draw_no_data(&mut out);
    }
    draw_step_labels(&mut out, &frame, &steps);
    draw_failures(&mut out, &frame, ops);
    draw_axes(&mut out, &frame);
    draw_legend(&mut out, &steps, p99_window_ms);
    draw_titles(&mut out, title, subtitle);
    out.push_str("</svg>\n");
    out
}

/// The scales: where a time and a latency land on the canvas.
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

    /// Times outside the run are drawn at its nearest edge.
    fn x_px(&self, at_ms: i64) -> f64 {
        let at_ms = at_ms.clamp(0, self.duration_ms);
        PLOT_LEFT_PX + (PLOT_RIGHT_PX - PLOT_LEFT_PX) * at_ms as f64 / self.duration_ms as f64
    }

    fn y_px(&self, latency_ms: f64) -> f64 {
        latency_y_px(latency_ms, self.top_ms)
    }
}

/// The smallest power of ten at or above `ms` (at least 1).
fn decade_at_or_above(ms: f64) -> f64 {
    10f64.powi(ms.max(1.0).log10().ceil() as i32)
}

/// Log scale from `FLOOR_MS` (plot bottom) to `top_ms` (plot top). NaN and values below
/// the floor land on the floor, values above the top on the top, so nothing escapes the
/// plot area.
fn latency_y_px(latency_ms: f64, top_ms: f64) -> f64 {
    let top_ms = top_ms.max(FLOOR_MS * 10.0);
    let ms = if latency_ms.is_nan() {
        FLOOR_MS
    } else {
        latency_ms.clamp(FLOOR_MS, top_ms)
    };
    let share = (ms / FLOOR_MS).log10() / (top_ms / FLOOR_MS).log10();
    PLOT_BOTTOM_PX - share * (PLOT_BOTTOM_PX - PLOT_TOP_PX)
}

/// Operations per occupied bucket, keyed by the bucket's (column, row). Ordered, so the
/// drawing order (hence the output) is deterministic.
fn buckets<'a>(
    frame: &Frame,
    ops: impl Iterator<Item = &'a PlotOp>,
    bucket_px: f64,
) -> BTreeMap<(i32, i32), u32> {
    let mut counts = BTreeMap::new();
    for op in ops {
        let column = (frame.x_px(op.at_ms) / bucket_px).floor() as i32;
        let row = (frame.y_px(op.latency_ms) / bucket_px).floor() as i32;
        *counts.entry((column, row)).or_insert(0) += 1;
    }
    counts
}

/// The centre of a bucket, in px.
fn bucket_centre_px(index: i32, bucket_px: f64) -> f64 {
    f64::from(index) * bucket_px + bucket_px / 2.0
}

/// Successful operations: one path per density level, each dot a zero-length segment
/// with round caps (about 10 bytes a dot instead of 40 for a `<circle>`).
fn draw_ok_dots(out: &mut String, frame: &Frame, ops: &[PlotOp]) {
    let counts = buckets(frame, ops.iter().filter(|o| !o.failed), OK_BUCKET_PX);
    for (level, &(min_count, opacity)) in OK_DENSITY_LEVELS.iter().enumerate() {
        let next_min = OK_DENSITY_LEVELS
            .get(level + 1)
            .map_or(u32::MAX, |&(next, _)| next);
        let mut d = String::new();
        for (&(column, row), &count) in &counts {
            if count >= min_count && count < next_min {
                push(
                    &mut d,
                    format_args!(
                        "M{} {}h0",
                        num(bucket_centre_px(column, OK_BUCKET_PX)),
                        num(bucket_centre_px(row, OK_BUCKET_PX))
                    ),
                );
            }
        }
        if !d.is_empty() {
            push(
                out,
                format_args!(
                    "<path d=\"{d}\" stroke=\"{OK_COLOR}\" stroke-opacity=\"{}\" \
                     stroke-width=\"3\" stroke-linecap=\"round\" fill=\"none\"/>\n",
                    num2(opacity)
                ),
            );
        }
    }
}

/// Failed operations: always drawn (bucketed only to bound the size), as red crosses
/// over the dots and the p99 line so they stand out.
fn draw_failures(out: &mut String, frame: &Frame, ops: &[PlotOp]) {
    let counts = buckets(frame, ops.iter().filter(|o| o.failed), FAILED_BUCKET_PX);
    if counts.is_empty() {
        return;
    }
    let mut d = String::new();
    for &(column, row) in counts.keys() {
        let x = bucket_centre_px(column, FAILED_BUCKET_PX);
        let y = bucket_centre_px(row, FAILED_BUCKET_PX);
        push(&mut d, format_args!("{}", cross_path(x, y, 3.5)));
    }
    push(
        out,
        format_args!(
            "<path class=\"failed\" d=\"{d}\" stroke=\"{FAILED_COLOR}\" stroke-width=\"1.6\" \
             fill=\"none\"/>\n"
        ),
    );
}

/// An X of half-width `half_px` centred on (x, y), as path data.
fn cross_path(x: f64, y: f64, half_px: f64) -> String {
    let size = num(2.0 * half_px);
    format!(
        "M{} {}l{size} {size}m0-{size}l-{size} {size}",
        num(x - half_px),
        num(y - half_px)
    )
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

/// The p99 line. A window with no successful operation breaks the line rather than
/// being bridged: that gap is an outage and should look like one.
fn draw_p99_line(out: &mut String, frame: &Frame, ops: &[PlotOp], window_ms: i64) {
    let p99s = p99_by_window(frame, ops, window_ms);
    let mut d = String::new();
    for (index, p99_ms) in p99s.iter().enumerate() {
        let Some(p99_ms) = p99_ms else { continue };
        let start_ms = index as i64 * window_ms;
        let mid_ms = (start_ms + start_ms.saturating_add(window_ms).min(frame.duration_ms)) / 2;
        let (x, y) = (frame.x_px(mid_ms), frame.y_px(*p99_ms));
        let follows = index > 0 && p99s[index - 1].is_some();
        let command = if follows { "L" } else { "M" };
        push(&mut d, format_args!("{command}{} {}", num(x), num(y)));
        // A lone window would be an invisible zero-length line; make it a dot.
        let lone = !follows && p99s.get(index + 1).is_none_or(|next| next.is_none());
        if lone {
            d.push_str("h0");
        }
    }
    if !d.is_empty() {
        push(
            out,
            format_args!(
                "<path class=\"p99\" d=\"{d}\" stroke=\"{P99_COLOR}\" stroke-width=\"1.5\" \
                 stroke-linejoin=\"round\" stroke-linecap=\"round\" fill=\"none\"/>\n"
            ),
        );
    }
}

/// Step kinds, by the first word of a step's label; each has its own color.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepKind {
    Learner,
    Promote,
    MoveLeader,
    Remove,
    Stop,
    Other,
}

impl StepKind {
    /// Legend order: the order a member replacement goes through them.
    const ALL: [StepKind; 6] = [
        StepKind::Learner,
        StepKind::Promote,
        StepKind::MoveLeader,
        StepKind::Remove,
        StepKind::Stop,
        StepKind::Other,
    ];

    fn of(label: &str) -> StepKind {
        let first = label
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if first.contains("learner") {
            StepKind::Learner
        } else if first.starts_with("promote") {
            StepKind::Promote
        } else if first.contains("leader") {
            StepKind::MoveLeader
        } else if first.starts_with("remove") {
            StepKind::Remove
        } else if first.starts_with("stop") {
            StepKind::Stop
        } else {
            StepKind::Other
        }
    }

    fn color(self) -> &'static str {
        match self {
            StepKind::Learner => "#2ca02c",
            StepKind::Promote => "#9467bd",
            StepKind::MoveLeader => "#ff7f0e",
            StepKind::Remove => "#8c564b",
            StepKind::Stop => "#e377c2",
            StepKind::Other => "#7f7f7f",
        }
    }

    fn name(self) -> &'static str {
        match self {
            StepKind::Learner => "add learner",
            StepKind::Promote => "promote",
            StepKind::MoveLeader => "move leader",
            StepKind::Remove => "remove member",
            StepKind::Stop => "stop machine",
            StepKind::Other => "other step",
        }
    }
}

/// A dashed line per step, under the data, with a tooltip giving its label and time.
fn draw_step_lines(out: &mut String, frame: &Frame, steps: &[&PlotStep]) {
    for step in steps {
        let x = num(frame.x_px(step.at_ms));
        push(
            out,
            format_args!(
                "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"{}\" \
                 stroke-width=\"1.2\" stroke-dasharray=\"5 3\"><title>{} at {} s</title></line>\n",
                num(PLOT_TOP_PX),
                num(PLOT_BOTTOM_PX),
                StepKind::of(&step.label).color(),
                escape(&step.label),
                num(step.at_ms as f64 / 1000.0),
            ),
        );
    }
}

/// Where each step's label goes (its baseline's x), in step order. A label sits just
/// left of its line; one that would overlap the previous label moves right just enough
/// not to, so a burst of steps stays readable (the color ties it to its line).
fn step_label_xs_px(frame: &Frame, steps: &[&PlotStep]) -> Vec<f64> {
    let mut previous_px = f64::NEG_INFINITY;
    steps
        .iter()
        .map(|step| {
            let x = (frame.x_px(step.at_ms) - 3.0).max(previous_px + STEP_LABEL_GAP_PX);
            previous_px = x;
            x
        })
        .collect()
}

/// Labels on end, reading upward and hanging from the top of the plot, with a white
/// halo so they stay legible over dots.
fn draw_step_labels(out: &mut String, frame: &Frame, steps: &[&PlotStep]) {
    let top = num(PLOT_TOP_PX + 4.0);
    for (step, x) in steps.iter().zip(step_label_xs_px(frame, steps)) {
        let x = num(x);
        push(
            out,
            format_args!(
                "<text x=\"{x}\" y=\"{top}\" transform=\"rotate(-90 {x} {top})\" \
                 text-anchor=\"end\" font-size=\"10\" fill=\"{}\" stroke=\"white\" \
                 stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\">{}</text>\n",
                StepKind::of(&step.label).color(),
                escape(&step.label),
            ),
        );
    }
}

/// Light grid lines at the time ticks and at each latency decade.
fn draw_grid(out: &mut String, frame: &Frame) {
    let mut d = String::new();
    for at_ms in x_ticks_ms(frame.duration_ms) {
        let x = num(frame.x_px(at_ms));
        push(
            &mut d,
            format_args!("M{x} {}V{}", num(PLOT_TOP_PX), num(PLOT_BOTTOM_PX)),
        );
    }
    for decade in decades(frame.top_ms) {
        let y = num(frame.y_px(10f64.powi(decade)));
        push(
            &mut d,
            format_args!("M{} {y}H{}", num(PLOT_LEFT_PX), num(PLOT_RIGHT_PX)),
        );
    }
    push(
        out,
        format_args!("<path d=\"{d}\" stroke=\"{GRID_COLOR}\" stroke-width=\"1\"/>\n"),
    );
}

/// Tick times: multiples of a round interval, from 0 to the end of the run.
fn x_ticks_ms(duration_ms: i64) -> Vec<i64> {
    let step_ms = X_TICK_STEPS_MS
        .iter()
        .copied()
        .find(|s| duration_ms / s <= MAX_X_TICKS)
        .unwrap_or_else(|| duration_ms / MAX_X_TICKS + 1);
    (0..=duration_ms / step_ms).map(|i| i * step_ms).collect()
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

/// Axis lines, ticks, tick labels and axis titles.
fn draw_axes(out: &mut String, frame: &Frame) {
    let (left, right) = (num(PLOT_LEFT_PX), num(PLOT_RIGHT_PX));
    let (top, bottom) = (num(PLOT_TOP_PX), num(PLOT_BOTTOM_PX));
    let mut ticks = String::new();
    let mut labels = String::new();
    let ticks_ms = x_ticks_ms(frame.duration_ms);
    // Sub-second intervals need a decimal to tell the ticks apart.
    let whole_seconds = ticks_ms.get(1).is_none_or(|t| t % 1000 == 0);
    for at_ms in ticks_ms {
        let x = num(frame.x_px(at_ms));
        push(&mut ticks, format_args!("M{x} {bottom}v5"));
        let seconds = at_ms as f64 / 1000.0;
        let label = if whole_seconds {
            format!("{}", at_ms / 1000)
        } else {
            format!("{seconds:.1}")
        };
        push(
            &mut labels,
            format_args!(
                "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>\n",
                num(PLOT_BOTTOM_PX + 18.0)
            ),
        );
    }
    for decade in decades(frame.top_ms) {
        let base_ms = 10f64.powi(decade);
        let y = num(frame.y_px(base_ms));
        push(&mut ticks, format_args!("M{left} {y}h-5"));
        push(
            &mut labels,
            format_args!(
                "<text x=\"{}\" y=\"{y}\" text-anchor=\"end\" dy=\"0.35em\">{}</text>\n",
                num(PLOT_LEFT_PX - 8.0),
                decade_label(decade)
            ),
        );
        // Minor ticks at 2..9 of each decade show that the scale is logarithmic.
        if base_ms < frame.top_ms {
            for multiple in 2..10 {
                let y = num(frame.y_px(base_ms * f64::from(multiple)));
                push(&mut ticks, format_args!("M{left} {y}h-3"));
            }
        }
    }
    push(
        out,
        format_args!(
            "<path d=\"M{left} {top}V{bottom}H{right}{ticks}\" stroke=\"{AXIS_COLOR}\" \
             stroke-width=\"1\" fill=\"none\"/>\n\
             <g font-size=\"11\" fill=\"{AXIS_COLOR}\">\n{labels}</g>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" fill=\"{AXIS_COLOR}\">\
             time since the workload started (s)</text>\n\
             <text x=\"{ylx}\" y=\"{yly}\" transform=\"rotate(-90 {ylx} {yly})\" \
             text-anchor=\"middle\" font-size=\"12\" fill=\"{AXIS_COLOR}\">latency (ms)</text>\n",
            num((PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2.0),
            num(PLOT_BOTTOM_PX + 42.0),
            ylx = num(22.0),
            yly = num((PLOT_TOP_PX + PLOT_BOTTOM_PX) / 2.0),
        ),
    );
}

/// Says so, rather than leaving an empty frame that looks like a rendering bug.
fn draw_no_data(out: &mut String) {
    push(
        out,
        format_args!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" fill=\"#888\">\
             no operations</text>\n",
            num((PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2.0),
            num((PLOT_TOP_PX + PLOT_BOTTOM_PX) / 2.0),
        ),
    );
}

/// The legend, right of the plot: the three data marks, then the step kinds present.
fn draw_legend(out: &mut String, steps: &[&PlotStep], p99_window_ms: i64) {
    const ROW_PX: f64 = 18.0;
    let x = LEGEND_LEFT_PX + 10.0;
    let text_x = num(x + 24.0);
    let mut y = PLOT_TOP_PX + 16.0;
    let mut body = String::new();
    let row = |body: &mut String, y: f64, mark: String, label: &str| {
        push(
            body,
            format_args!(
                "{mark}<text x=\"{text_x}\" y=\"{}\" dy=\"0.35em\">{}</text>\n",
                num(y),
                escape(label)
            ),
        );
    };

    let dot = format!(
        "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{OK_COLOR}\" fill-opacity=\"0.8\"/>",
        num(x + 9.0),
        num(y)
    );
    row(&mut body, y, dot, "ok operation");
    y += ROW_PX;
    let cross = format!(
        "<path d=\"{}\" stroke=\"{FAILED_COLOR}\" stroke-width=\"1.6\"/>",
        cross_path(x + 9.0, y, 3.5)
    );
    row(&mut body, y, cross, "failed operation");
    y += ROW_PX;
    let line = format!(
        "<path d=\"M{} {}h18\" stroke=\"{P99_COLOR}\" stroke-width=\"1.5\"/>",
        num(x),
        num(y)
    );
    row(&mut body, y, line, &p99_label(p99_window_ms));
    y += ROW_PX;

    let kinds: Vec<StepKind> = StepKind::ALL
        .into_iter()
        .filter(|kind| steps.iter().any(|s| StepKind::of(&s.label) == *kind))
        .collect();
    if !kinds.is_empty() {
        y += 4.0;
        push(
            &mut body,
            format_args!(
                "<text x=\"{}\" y=\"{}\" dy=\"0.35em\" fill=\"{AXIS_COLOR}\">rollout steps</text>\n",
                num(x),
                num(y)
            ),
        );
        y += ROW_PX;
    }
    for kind in kinds {
        let line = format!(
            "<path d=\"M{} {}h18\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>",
            num(x),
            num(y),
            kind.color()
        );
        row(&mut body, y, line, kind.name());
        y += ROW_PX;
    }
    let height = y - PLOT_TOP_PX - ROW_PX / 2.0 + 8.0;
    push(
        out,
        format_args!(
            "<g font-size=\"11\">\n<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" \
             fill=\"white\" stroke=\"#ccc\"/>\n{body}</g>\n",
            num(LEGEND_LEFT_PX),
            num(PLOT_TOP_PX),
            num(WIDTH_PX - LEGEND_LEFT_PX - 10.0),
            num(height),
        ),
    );
}

fn p99_label(window_ms: i64) -> String {
    if window_ms == 1_000 {
        "p99 per second".to_string()
    } else {
        format!("p99 per {} s", num(window_ms as f64 / 1000.0))
    }
}

fn draw_titles(out: &mut String, title: &str, subtitle: &str) {
    push(
        out,
        format_args!(
            "<text x=\"{x}\" y=\"26\" font-size=\"17\" font-weight=\"bold\">{}</text>\n\
             <text x=\"{x}\" y=\"46\" font-size=\"12\" fill=\"{AXIS_COLOR}\">{}</text>\n",
            escape(title),
            escape(subtitle),
            x = num(PLOT_LEFT_PX),
        ),
    );
}

/// Appends formatted text. Writing to a String cannot fail, so the Result is dropped
/// here once instead of at every call.
fn push(out: &mut String, args: fmt::Arguments<'_>) {
    let _ = out.write_fmt(args);
}

/// A number with at most one decimal, without a trailing ".0": coordinates are the bulk
/// of the document, and tenths of a pixel are finer than anyone can see.
fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".to_string();
    }
    let tenths = (v * 10.0).round() as i64;
    let sign = if tenths < 0 { "-" } else { "" };
    let (whole, tenth) = (tenths.abs() / 10, tenths.abs() % 10);
    if tenth == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{tenth}")
    }
}

/// Two decimals, for opacities (one would merge the density levels).
fn num2(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Escapes text for XML content and attribute values. Control characters XML 1.0 does
/// not allow at all (even escaped) become U+FFFD, so a stray byte in an error message
/// cannot make the document unreadable.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so tests need no crate and never flake.
    struct Lcg(u64);

    impl Lcg {
        fn next_f64(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn ops(n: usize, duration_ms: i64, seed: u64) -> Vec<PlotOp> {
        let mut rng = Lcg(seed);
        (0..n)
            .map(|i| PlotOp {
                at_ms: (i as i64 * duration_ms) / n as i64,
                // Log-uniform over 0.1 ms to 2 s: the worst case for bucketing.
                latency_ms: 0.1 * 20_000f64.powf(rng.next_f64()),
                failed: i % 97 == 0,
            })
            .collect()
    }

    fn steps() -> Vec<PlotStep> {
        [
            (1_000, "add-learner bench-4"),
            (2_000, "promote bench-4"),
            (2_050, "move-leader"),
            (3_000, "remove-member bench-1"),
            (3_010, "stop-machine bench-1"),
            (4_000, "kill <&> \"it's\""),
        ]
        .into_iter()
        .map(|(at_ms, label)| PlotStep {
            at_ms,
            label: label.to_string(),
        })
        .collect()
    }

    /// Checks tags nest and close, and every `&` starts one of the five entities.
    fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.ends_with("</svg>\n"));
        assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("viewBox=\"0 0 1200 520\""));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        let mut open: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = start + rest[start..].find('>').expect("unclosed tag");
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                open.push(tag.split_whitespace().next().expect("tag name"));
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        for (i, _) in svg.match_indices('&') {
            let entity = &svg[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "bare & at {i}"
            );
        }
    }

    #[test]
    fn renders_well_formed_svg() {
        let svg = latency_svg("t", "s", &ops(5_000, 10_000, 1), &steps(), 10_000);
        assert_well_formed(&svg);
        assert!(svg.contains("time since the workload started (s)"));
        assert!(svg.contains("latency (ms)"));
        assert!(svg.contains("p99 per second"));
    }

    #[test]
    fn every_step_label_is_escaped() {
        let svg = latency_svg("a < b & c", "x > \"y\"", &[], &steps(), 5_000);
        assert_well_formed(&svg);
        for step in steps() {
            assert!(svg.contains(&escape(&step.label)), "{}", step.label);
        }
        assert!(svg.contains("kill &lt;&amp;&gt; &quot;it&apos;s&quot;"));
        assert!(svg.contains("a &lt; b &amp; c"));
        assert!(!svg.contains("<&>"));
    }

    #[test]
    fn legend_lists_only_step_kinds_present() {
        let only_promote = [PlotStep {
            at_ms: 10,
            label: "promote bench-2".to_string(),
        }];
        let svg = latency_svg("t", "", &[], &only_promote, 1_000);
        assert!(svg.contains(">promote</text>"));
        assert!(!svg.contains(">remove member</text>"));
        let svg = latency_svg("t", "", &[], &steps(), 5_000);
        for kind in StepKind::ALL {
            assert!(
                svg.contains(&format!(">{}</text>", kind.name())),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn failed_ops_are_red_marks() {
        let ops = [
            PlotOp {
                at_ms: 100,
                latency_ms: 2.0,
                failed: false,
            },
            PlotOp {
                at_ms: 500,
                latency_ms: 2_000.0,
                failed: true,
            },
        ];
        let svg = latency_svg("t", "", &ops, &[], 1_000);
        let failed = svg
            .lines()
            .find(|l| l.starts_with("<path class=\"failed\""))
            .expect("a path for failures");
        assert!(failed.contains(&format!("stroke=\"{FAILED_COLOR}\"")));
        // The cross is centred on the failure's bucket.
        let frame = Frame::new(&ops, 1_000);
        let x = bucket_centre_px(
            (frame.x_px(500) / FAILED_BUCKET_PX).floor() as i32,
            FAILED_BUCKET_PX,
        );
        assert!(failed.contains(&format!("M{} ", num(x - 3.5))), "{failed}");
    }

    #[test]
    fn lone_outliers_survive_thinning() {
        let mut many = ops(100_000, 60_000, 7);
        for op in &mut many {
            op.latency_ms = 2.0;
            op.failed = false;
        }
        many.push(PlotOp {
            at_ms: 30_000,
            latency_ms: 900.0,
            failed: false,
        });
        let frame = Frame::new(&many, 60_000);
        let counts = buckets(&frame, many.iter(), OK_BUCKET_PX);
        let row = (frame.y_px(900.0) / OK_BUCKET_PX).floor() as i32;
        assert_eq!(counts.keys().filter(|(_, r)| *r == row).count(), 1);
    }

    #[test]
    fn three_hundred_thousand_ops_stay_small() {
        let svg = latency_svg("t", "s", &ops(300_000, 600_000, 3), &steps(), 600_000);
        assert_well_formed(&svg);
        assert!(svg.len() < 2_000_000, "{} bytes", svg.len());
    }

    #[test]
    fn rendering_is_deterministic() {
        let ops = ops(20_000, 30_000, 5);
        let a = latency_svg("t", "s", &ops, &steps(), 30_000);
        let b = latency_svg("t", "s", &ops, &steps(), 30_000);
        assert_eq!(a, b);
    }

    #[test]
    fn edge_cases_render() {
        assert_well_formed(&latency_svg("", "", &[], &[], 0));
        assert_well_formed(&latency_svg("", "", &[], &[], -5));
        let odd = [
            PlotOp {
                at_ms: -100,
                latency_ms: f64::NAN,
                failed: false,
            },
            PlotOp {
                at_ms: 99_999,
                latency_ms: -3.0,
                failed: true,
            },
            PlotOp {
                at_ms: 500,
                latency_ms: f64::INFINITY,
                failed: false,
            },
            PlotOp {
                at_ms: i64::MAX,
                latency_ms: 1e300,
                failed: false,
            },
        ];
        let far = [PlotStep {
            at_ms: i64::MIN,
            label: "bell\u{7}".to_string(),
        }];
        let svg = latency_svg("", "", &odd, &far, 0);
        assert_well_formed(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert!(!svg.contains('\u{7}'));
    }

    #[test]
    fn everything_stays_inside_the_plot() {
        let frame = Frame::new(&[], 1_000);
        assert_eq!(frame.x_px(-1), PLOT_LEFT_PX);
        assert_eq!(frame.x_px(5_000), PLOT_RIGHT_PX);
        assert_eq!(frame.y_px(f64::NAN), PLOT_BOTTOM_PX);
        assert_eq!(frame.y_px(-1.0), PLOT_BOTTOM_PX);
        assert_eq!(frame.y_px(f64::INFINITY), PLOT_TOP_PX);
        assert_eq!(frame.top_ms, 10_000.0);
    }

    #[test]
    fn log_scale_puts_decades_evenly() {
        let top_ms = 10_000.0;
        let decade_px = (PLOT_BOTTOM_PX - PLOT_TOP_PX) / 5.0;
        let one = latency_y_px(1.0, top_ms);
        let thousand = latency_y_px(1_000.0, top_ms);
        assert!((one - thousand - 3.0 * decade_px).abs() < 1e-9);
        assert!((latency_y_px(0.1, top_ms) - PLOT_BOTTOM_PX).abs() < 1e-9);
        assert!((latency_y_px(top_ms, top_ms) - PLOT_TOP_PX).abs() < 1e-9);
        // 10 ms is halfway between 1 ms and 100 ms, as a log scale should have it.
        let ten = latency_y_px(10.0, top_ms);
        let hundred = latency_y_px(100.0, top_ms);
        assert!((one - ten - (ten - hundred)).abs() < 1e-9);
    }

    #[test]
    fn axis_top_is_a_clean_decade() {
        let op = |latency_ms| PlotOp {
            at_ms: 0,
            latency_ms,
            failed: false,
        };
        assert_eq!(Frame::new(&[op(5.0)], 1).top_ms, 10_000.0);
        assert_eq!(Frame::new(&[op(12_000.0)], 1).top_ms, 100_000.0);
        assert_eq!(decades(10_000.0), -1..=4);
        assert_eq!(decade_label(-1), "0.1");
        assert_eq!(decade_label(3), "1000");
    }

    #[test]
    fn time_ticks_are_round_and_not_too_many() {
        assert_eq!(x_ticks_ms(30_000).get(1), Some(&2_000));
        assert_eq!(x_ticks_ms(600_000).get(1), Some(&60_000));
        assert_eq!(x_ticks_ms(1_000).get(1), Some(&100));
        for duration_ms in [1, 999, 1_000, 7_000, 30_000, 100_000, 3_600_000, i64::MAX] {
            let ticks = x_ticks_ms(duration_ms);
            assert!((1..=16).contains(&ticks.len()), "{duration_ms}: {ticks:?}");
            assert!(ticks.iter().all(|t| *t <= duration_ms));
        }
    }

    #[test]
    fn p99_follows_each_window() {
        let mut ops: Vec<PlotOp> = (0..200)
            .map(|i| PlotOp {
                at_ms: i * 10,
                latency_ms: if i < 100 { 1.0 } else { 50.0 },
                failed: false,
            })
            .collect();
        // A failure is not a latency sample.
        ops.push(PlotOp {
            at_ms: 10,
            latency_ms: 2_000.0,
            failed: true,
        });
        let frame = Frame::new(&ops, 3_000);
        assert_eq!(
            p99_by_window(&frame, &ops, 1_000),
            vec![Some(1.0), Some(50.0), None]
        );
        assert_eq!(p99_window_ms(30_000), 1_000);
        assert_eq!(p99_window_ms(3_600_000), 10_000);
    }

    #[test]
    fn numbers_have_at_most_one_decimal() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(-0.46), "-0.5");
        assert_eq!(num(-0.04), "0");
        assert_eq!(num(f64::NAN), "0");
        assert_eq!(num2(0.3), "0.3");
        assert_eq!(num2(0.55), "0.55");
    }
}
