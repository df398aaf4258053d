//! The picture's tests: what it shows, where, and that it stays well-formed and small.

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
        (1_000, "add-learner bench-4", StepKind::Learner),
        (1_100, "start-machine bench-4", StepKind::Start),
        (2_000, "promote bench-4", StepKind::Promote),
        (2_050, "move-leader", StepKind::MoveLeader),
        (3_000, "remove-member bench-1", StepKind::Remove),
        (3_010, "stop-machine bench-1", StepKind::Stop),
        (4_000, "kill <&> \"it's\"", StepKind::Other),
    ]
    .into_iter()
    .map(|(at_ms, label, kind)| PlotStep {
        at_ms,
        label: label.to_string(),
        kind,
    })
    .collect()
}

fn svg(title: &str, ops: &[PlotOp], steps: &[PlotStep], duration_ms: i64) -> String {
    latency_svg(title, "s", ops, steps, duration_ms).expect("renders")
}

/// Checks tags nest and close, and every `&` starts one of the five entities.
fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg "), "{}", &svg[..40.min(svg.len())]);
    assert!(svg.ends_with("</svg>\n"));
    assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("viewBox=\"0 0 1200 520\""));
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
    assert!(!svg.chars().any(|c| c.is_control() && c != '\n'));
}

/// The `<text>` elements: their opening tag and their (escaped) content.
fn texts(svg: &str) -> Vec<(&str, &str)> {
    svg.split("<text ")
        .skip(1)
        .map(|t| {
            let (tag, rest) = t.split_once('>').expect("a text tag");
            let content = rest.split("</text>").next().expect("closed");
            (tag, content.trim())
        })
        .collect()
}

fn attr(tag: &str, name: &str) -> f64 {
    let start = tag.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
    let value = &tag[start..];
    value[..value.find('"').expect("quoted")]
        .parse()
        .expect("a number")
}

/// The centres of the successful operations' dots (the legend's sample is right
/// of the plot and left out).
fn dots(svg: &str) -> Vec<(f64, f64)> {
    svg.lines()
        .filter(|l| l.starts_with("<circle") && l.contains("fill=\"#4682B4\""))
        .map(|l| (attr(l, "cx"), attr(l, "cy")))
        .filter(|&(x, _)| x < f64::from(LEGEND_LEFT_PX))
        .collect()
}

#[test]
fn renders_well_formed_svg() {
    let svg = svg("t", &ops(5_000, 10_000, 1), &steps(), 10_000);
    assert_well_formed(&svg);
    let texts: Vec<&str> = texts(&svg).into_iter().map(|(_, t)| t).collect();
    for wanted in [
        "time since the workload started (s)",
        "latency (ms)",
        "p99 per second",
        "ok operation",
        "failed operation",
    ] {
        assert!(texts.contains(&wanted), "{wanted}: {texts:?}");
    }
}

#[test]
fn every_step_label_is_escaped() {
    let svg = latency_svg("a < b & c", "x > \"y\"", &[], &steps(), 5_000).expect("renders");
    assert_well_formed(&svg);
    let texts: Vec<&str> = texts(&svg).into_iter().map(|(_, t)| t).collect();
    assert!(texts.contains(&"kill &lt;&amp;&gt; &quot;it&apos;s&quot;"));
    assert!(texts.contains(&"a &lt; b &amp; c"));
    assert!(texts.contains(&"x &gt; &quot;y&quot;"));
    assert!(texts.contains(&"add-learner bench-4"));
    assert!(!svg.contains("<&>"));
}

#[test]
fn legend_lists_only_step_kinds_present() {
    let only_promote = [PlotStep {
        at_ms: 10,
        label: "promote bench-2".to_string(),
        kind: StepKind::Promote,
    }];
    let texts = texts_of(&svg("t", &[], &only_promote, 1_000));
    assert!(texts.iter().any(|t| t == "promote"));
    assert!(texts.iter().any(|t| t == "rollout steps"));
    assert!(!texts.iter().any(|t| t == "remove member"));
    let texts = texts_of(&svg("t", &[], &steps(), 5_000));
    for kind in StepKind::ALL {
        assert!(texts.iter().any(|t| t == kind.name()), "{kind:?}");
    }
    let texts = texts_of(&svg("t", &[], &[], 5_000));
    assert!(!texts.iter().any(|t| t == "rollout steps"));
}

fn texts_of(svg: &str) -> Vec<String> {
    texts(svg).into_iter().map(|(_, t)| t.to_string()).collect()
}

#[test]
fn step_labels_take_their_kinds_color() {
    let svg = svg("t", &[], &steps(), 5_000);
    let (tag, _) = texts(&svg)
        .into_iter()
        .find(|&(tag, t)| t == "promote bench-4" && !tag.contains("#FFFFFF"))
        .expect("the label");
    assert!(tag.contains("fill=\"#9467BD\""), "{tag}");
    assert!(tag.contains("rotate(270"), "{tag}");
}

#[test]
fn failed_ops_are_red_crosses_where_they_happened() {
    let ops = [
        PlotOp {
            at_ms: 100,
            latency_ms: 2.0,
            failed: false,
        },
        PlotOp {
            at_ms: 500,
            latency_ms: 1_000.0,
            failed: true,
        },
    ];
    let svg = svg("t", &ops, &[], 1_000);
    let red: Vec<&str> = svg
        .lines()
        .filter(|l| l.starts_with("<line") && l.contains("stroke=\"#D62728\""))
        .filter(|l| attr(l, "x1") < f64::from(LEGEND_LEFT_PX))
        .collect();
    assert_eq!(red.len(), 2, "one cross: {red:?}");
    // Halfway through the run, a decade below the top of the 0.1 ms..10 s axis.
    let x = (attr(red[0], "x1") + attr(red[0], "x2")) / 2.0;
    let y = (attr(red[0], "y1") + attr(red[0], "y2")) / 2.0;
    let want_x = f64::from(PLOT_LEFT_PX + PLOT_RIGHT_PX) / 2.0;
    let want_y = f64::from(PLOT_TOP_PX) + f64::from(PLOT_BOTTOM_PX - PLOT_TOP_PX) / 5.0;
    let slack = f64::from(FAILED_BUCKET_PX) + 1.0;
    assert!((x - want_x).abs() <= slack, "{x} vs {want_x}");
    assert!((y - want_y).abs() <= slack, "{y} vs {want_y}");
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
    let svg = svg("t", &many, &[], 60_000);
    let outliers: Vec<(f64, f64)> = dots(&svg)
        .into_iter()
        .filter(|&(_, y)| y < f64::from(PLOT_BOTTOM_PX + PLOT_TOP_PX) / 2.0)
        .collect();
    assert_eq!(outliers.len(), 1, "{outliers:?}");
}

#[test]
fn the_dot_count_is_bounded_by_the_plot_area() {
    let svg = svg("t", &ops(300_000, 600_000, 3), &steps(), 600_000);
    assert_well_formed(&svg);
    let area_px = (PLOT_RIGHT_PX - PLOT_LEFT_PX + OK_BUCKET_PX)
        * (PLOT_BOTTOM_PX - PLOT_TOP_PX + OK_BUCKET_PX);
    let dots = dots(&svg).len();
    assert!(dots <= (area_px / (OK_BUCKET_PX * OK_BUCKET_PX)) as usize);
    assert!(dots > 1_000, "{dots}");
    assert!(svg.len() < 6_000_000, "{} bytes", svg.len());
}

#[test]
fn rendering_is_deterministic() {
    let ops = ops(20_000, 30_000, 5);
    let a = svg("t", &ops, &steps(), 30_000);
    let b = svg("t", &ops, &steps(), 30_000);
    assert_eq!(a, b);
}

#[test]
fn edge_cases_render_inside_the_plot() {
    assert_well_formed(&svg("", &[], &[], 0));
    assert_well_formed(&svg("", &[], &[], -5));
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
        kind: StepKind::Other,
    }];
    let svg = svg("tab\there", &odd, &far, 0);
    assert_well_formed(&svg);
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    assert!(texts_of(&svg).contains(&"bell\u{FFFD}".to_string()));
    let dots = dots(&svg);
    assert_eq!(dots.len(), 3);
    for (x, y) in dots {
        let slack = f64::from(OK_BUCKET_PX);
        assert!((f64::from(PLOT_LEFT_PX) - slack..=f64::from(PLOT_RIGHT_PX) + slack).contains(&x));
        assert!((f64::from(PLOT_TOP_PX) - slack..=f64::from(PLOT_BOTTOM_PX) + slack).contains(&y));
    }
}

#[test]
fn points_are_clamped_to_the_run_and_the_axis() {
    let frame = Frame::new(&[], 1_000);
    assert_eq!(frame.top_ms, 10_000.0);
    assert_eq!(frame.point(-1, f64::NAN), (0.0, FLOOR_MS));
    assert_eq!(frame.point(5_000, -1.0), (1.0, FLOOR_MS));
    assert_eq!(frame.point(500, f64::INFINITY), (0.5, 10_000.0));
}

#[test]
fn log_scale_labels_each_decade_evenly() {
    let svg = svg("t", &ops(1_000, 10_000, 9), &[], 10_000);
    let labels = ["0.1", "1", "10", "100", "1000", "10000"];
    let ys: Vec<f64> = labels
        .iter()
        .map(|label| {
            let (tag, _) = texts(&svg)
                .into_iter()
                .find(|&(tag, t)| t == *label && tag.contains("text-anchor=\"end\""))
                .expect(label);
            attr(tag, "y")
        })
        .collect();
    assert!((ys[0] - f64::from(PLOT_BOTTOM_PX)).abs() <= 1.0, "{ys:?}");
    assert!((ys[5] - f64::from(PLOT_TOP_PX)).abs() <= 1.0, "{ys:?}");
    let decade_px = f64::from(PLOT_BOTTOM_PX - PLOT_TOP_PX) / 5.0;
    for pair in ys.windows(2) {
        assert!((pair[0] - pair[1] - decade_px).abs() <= 1.0, "{ys:?}");
    }
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
    assert_eq!(Frame::new(&[op(1e12)], 1).top_ms, MAX_TOP_MS);
    assert_eq!(decades(10_000.0), -1..=4);
    assert_eq!(decade_label(-1), "0.1");
    assert_eq!(decade_label(3), "1000");
}

#[test]
fn a_burst_of_step_labels_is_spread_out() {
    let xs = step_label_xs_px(&[100, 101, 102, 300]);
    assert_eq!(xs, vec![98, 110, 122, 298]);
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
    assert_eq!(p99_label(1_000), "p99 per second");
    assert_eq!(p99_label(10_000), "p99 per 10 s");
}
