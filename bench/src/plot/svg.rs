//! A [`Chart`] as SVG text, written by hand: two panels side by side (busbw against size,
//! time against size), a legend above them, the title and facts on top, the notes below.
//! Every point is a marker whose `<title>` holds its values (a browser shows them on hover);
//! no fonts, styles or scripts come from outside the document.

use std::fmt::Write as _;

use super::axis::{self, Axis};
use super::{Chart, Point};
use crate::{Error, Result};

/// The picture's width; the height follows from the legend's and the notes' lines.
const WIDTH: f64 = 1000.0;
/// The panels' plot areas: left and right edges of each, and their height.
const PANELS: [(f64, f64); 2] = [(80.0, 475.0), (585.0, 980.0)];
const PLOT_HEIGHT: f64 = 320.0;
/// Okabe and Ito's colours, which colour-blind readers tell apart; oxccl's (the first
/// series) is the blue.
const COLOURS: [&str; 8] = ["#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#999933"];
/// Characters of a wrapped line of facts or notes (12 and 11 px sans-serif across 900 px).
const WRAP: usize = 140;

/// What one panel plots against size.
#[derive(Clone, Copy)]
enum Quantity {
    Busbw,
    Time,
}

impl Quantity {
    /// The point's value, if this panel can show it: a finite number, positive on the log
    /// time axis, at least 0 on the busbw axis.
    fn of(self, point: &Point) -> Option<f64> {
        let (value, lowest_ok) = match self {
            Quantity::Busbw => (point.busbw, point.busbw >= 0.0),
            Quantity::Time => (point.time_us, point.time_us > 0.0),
        };
        (value.is_finite() && lowest_ok).then_some(value)
    }

    fn name(self) -> &'static str {
        match self {
            Quantity::Busbw => "busbw",
            Quantity::Time => "time",
        }
    }
}

/// The chart as a complete SVG document.
pub fn render(chart: &Chart) -> Result<String> {
    if chart.series.is_empty() {
        return Err(Error::Chart { what: format!("{:?}: nothing to draw: no series", chart.title) });
    }
    let mut notes = chart.notes.clone();
    let mut drawn: Vec<Vec<Point>> = Vec::new();
    for series in &chart.series {
        // A log size axis has no 0: 0-byte rows (nccl-tests -b 0) are left out, and said so.
        let mut points: Vec<Point> = series.points.iter().copied().filter(|p| p.bytes > 0).collect();
        if points.is_empty() {
            return Err(Error::Chart { what: format!("series {:?} has no point a log size axis can show (no row, or every row of 0 bytes)", series.label) });
        }
        points.sort_by_key(|p| p.bytes);
        let left_out = series.points.len() - points.len();
        if left_out > 0 {
            notes.push(format!("{}: {left_out} row{} of 0 bytes not drawn (log size axis)", series.label, if left_out == 1 { "" } else { "s" }));
        }
        drawn.push(points);
    }
    let all = || drawn.iter().flatten();
    let sizes = axis::size_axis(all().map(|p| p.bytes).min().unwrap_or(1), all().map(|p| p.bytes).max().unwrap_or(1));
    let busbw = axis::linear_axis(all().filter_map(|p| Quantity::Busbw.of(p)).fold(0.0, f64::max));
    let times: Vec<f64> = all().filter_map(|p| Quantity::Time.of(p)).collect();
    let time = match times.is_empty() {
        true => axis::time_axis(1.0, 10.0),
        false => axis::time_axis(times.iter().copied().fold(f64::INFINITY, f64::min), times.iter().copied().fold(0.0, f64::max)),
    };

    let mut body = String::new();
    let mut y = 30.0;
    text(&mut body, 40.0, y, "start", "font-size=\"18\" font-weight=\"bold\"", &chart.title);
    for line in wrap(&chart.facts.join(" · ")) {
        y += 18.0;
        text(&mut body, 40.0, y, "start", "font-size=\"12\" fill=\"#444\"", &line);
    }
    y = legend(&mut body, chart, y + 14.0);
    let top = y + 34.0;
    let bottom = top + PLOT_HEIGHT;
    let panels = [(Quantity::Busbw, &busbw, "Bus bandwidth", "busbw (GB/s)"), (Quantity::Time, &time, "Time per call", "time per call (log scale)")];
    for ((quantity, values, heading, unit), (left, right)) in panels.into_iter().zip(PANELS) {
        let frame = Frame { left, right, top, bottom, sizes: &sizes, values };
        notes.extend(panel(&mut body, &frame, quantity, heading, unit, chart, &drawn));
    }
    y = bottom + 40.0;
    for line in notes.iter().flat_map(|n| wrap(n)) {
        y += 15.0;
        text(&mut body, 40.0, y, "start", "font-size=\"11\" fill=\"#444\"", &line);
    }
    let height = y + 14.0;
    let mut svg = String::new();
    let _ = writeln!(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">"
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(&chart.title));
    let _ = writeln!(svg, "<rect width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>");
    svg += &body;
    svg += "</svg>\n";
    Ok(svg)
}

/// A panel's plot area and axes.
struct Frame<'a> {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    sizes: &'a Axis,
    values: &'a Axis,
}

impl Frame<'_> {
    fn x(&self, bytes: u64) -> f64 {
        self.left + self.sizes.fraction(bytes as f64) * (self.right - self.left)
    }

    fn y(&self, value: f64) -> f64 {
        self.bottom - self.values.fraction(value) * (self.bottom - self.top)
    }
}

/// One panel: grid, frame, ticks, axis titles, then a line and markers per series; returns
/// notes on the points it could not show.
fn panel(out: &mut String, frame: &Frame, quantity: Quantity, heading: &str, unit: &str, chart: &Chart, drawn: &[Vec<Point>]) -> Vec<String> {
    let mut notes = Vec::new();
    let _ = writeln!(out, "<g id=\"{}\">", quantity.name());
    let (left, right, top, bottom) = (frame.left, frame.right, frame.top, frame.bottom);
    text(out, left, top - 10.0, "start", "font-size=\"13\" font-weight=\"bold\"", heading);
    for tick in &frame.sizes.ticks {
        let x = frame.x(tick.value as u64);
        let _ = writeln!(out, "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#e4e4e4\"/>");
        text(out, x, bottom + 16.0, "middle", "font-size=\"11\"", &tick.label);
    }
    for tick in &frame.values.ticks {
        let y = frame.y(tick.value);
        let _ = writeln!(out, "<line x1=\"{left:.1}\" y1=\"{y:.1}\" x2=\"{right:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>");
        text(out, left - 6.0, y + 4.0, "end", "font-size=\"11\"", &tick.label);
    }
    let _ = writeln!(out, "<rect x=\"{left:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#444\"/>", right - left, bottom - top);
    text(out, (left + right) / 2.0, bottom + 36.0, "middle", "font-size=\"12\"", "message size (bytes, log scale)");
    let (x, y) = (left - 52.0, (top + bottom) / 2.0);
    text(out, x, y, "middle", &format!("font-size=\"12\" transform=\"rotate(-90 {x:.1} {y:.1})\""), unit);
    for (index, (series, points)) in chart.series.iter().zip(drawn).enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let _ = writeln!(out, "<g class=\"series\" data-series=\"{}\">", escape(&series.label));
        let shown: Vec<(Point, f64)> = points.iter().filter_map(|p| quantity.of(p).map(|v| (*p, v))).collect();
        if shown.len() < points.len() {
            let missing = points.len() - shown.len();
            notes.push(format!("{}: {missing} point{} not in the {} panel (a time of 0 on a log axis, or not a number)", series.label, if missing == 1 { "" } else { "s" }, quantity.name()));
        }
        let line: Vec<String> = shown.iter().map(|(p, v)| format!("{:.1},{:.1}", frame.x(p.bytes), frame.y(*v))).collect();
        let _ = writeln!(out, "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\" stroke-linejoin=\"round\"/>", line.join(" "));
        for (point, value) in &shown {
            let hover = format!("{}: {} ({} B): {} µs, busbw {} GB/s", series.label, axis::bytes_label(point.bytes), point.bytes, axis::compact(point.time_us), axis::compact(point.busbw));
            marker(out, index, frame.x(point.bytes), frame.y(*value), colour, &hover);
        }
        let _ = writeln!(out, "</g>");
    }
    let _ = writeln!(out, "</g>");
    notes
}

/// The legend from `top`, entries left to right, wrapping; returns the y below it.
fn legend(out: &mut String, chart: &Chart, top: f64) -> f64 {
    let (mut x, mut y) = (PANELS[0].0, top + 6.0);
    let _ = writeln!(out, "<g id=\"legend\">");
    for (index, series) in chart.series.iter().enumerate() {
        // 6.5 px per character of 12 px sans-serif is generous: entries never overlap.
        let width = 44.0 + 6.5 * series.label.chars().count() as f64;
        if x + width > PANELS[1].1 && x > PANELS[0].0 {
            x = PANELS[0].0;
            y += 20.0;
        }
        let colour = COLOURS[index % COLOURS.len()];
        let _ = writeln!(out, "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"1.8\"/>", x + 24.0);
        marker(out, index, x + 12.0, y, colour, &series.label);
        text(out, x + 30.0, y + 4.0, "start", "font-size=\"12\"", &series.label);
        x += width;
    }
    let _ = writeln!(out, "</g>");
    y + 6.0
}

/// Series `index`'s marker at (x, y): a circle, square, triangle, diamond, triangle down or
/// ring (so that series differ in shape as well as colour), with `hover` as its title.
fn marker(out: &mut String, index: usize, x: f64, y: f64, colour: &str, hover: &str) {
    let title = format!("<title>{}</title>", escape(hover));
    let _ = match index % 6 {
        0 => writeln!(out, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\">{title}</circle>"),
        1 => writeln!(out, "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"7\" height=\"7\" fill=\"{colour}\">{title}</rect>", x - 3.5, y - 3.5),
        2 => writeln!(out, "<path d=\"M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"{colour}\">{title}</path>", y - 4.5, x + 4.2, y + 3.0, x - 4.2, y + 3.0),
        3 => writeln!(out, "<path d=\"M{x:.1},{:.1} L{:.1},{y:.1} L{x:.1},{:.1} L{:.1},{y:.1} Z\" fill=\"{colour}\">{title}</path>", y - 4.5, x + 4.5, y + 4.5, x - 4.5),
        4 => writeln!(out, "<path d=\"M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\" fill=\"{colour}\">{title}</path>", y + 4.5, x + 4.2, y - 3.0, x - 4.2, y - 3.0),
        _ => writeln!(out, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"white\" stroke=\"{colour}\" stroke-width=\"1.6\">{title}</circle>"),
    };
}

/// A `<text>` element at (x, y) with `anchor` and further `attributes`.
fn text(out: &mut String, x: f64, y: f64, anchor: &str, attributes: &str, content: &str) {
    let _ = writeln!(out, "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" {attributes}>{}</text>", escape(content));
}

/// `text` with XML's five special characters escaped.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `line` broken at spaces into lines of at most [`WRAP`] characters (a longer word stays
/// whole).
fn wrap(line: &str) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in line.split(' ') {
        let current = lines.last_mut().expect("lines starts with one line and only grows");
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > WRAP {
            lines.push(word.to_string());
        } else {
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::Series;

    fn chart(series: Vec<Series>) -> Chart {
        Chart { title: "all_reduce, 2 ranks, 1 GPU (H100) on vm".into(), facts: vec!["float sum".into(), "out-of-place columns".into()], series, notes: vec!["Drawn from:".into(), "a: a.txt".into()] }
    }

    fn point(bytes: u64, time_us: f64, busbw: f64) -> Point {
        Point { bytes, time_us, busbw }
    }

    /// Two series: oxccl's points given out of order, NCCL's in order.
    fn two() -> Chart {
        chart(vec![
            Series { label: "oxccl".into(), points: vec![point(1 << 20, 1000.0, 4.0), point(8, 10.0, 0.0), point(1024, 20.0, 0.05)] },
            Series { label: "NCCL <2.28> & \"best\"".into(), points: vec![point(8, 12.0, 0.0), point(1024, 30.0, 0.03), point(1 << 20, 800.0, 2.5)] },
        ])
    }

    /// (x, y) pairs of a polyline's `points`.
    fn coordinates(polyline: roxmltree::Node) -> Vec<(f64, f64)> {
        let pairs = polyline.attribute("points").unwrap().split(' ');
        pairs
            .map(|pair| {
                let (x, y) = pair.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    fn number(node: roxmltree::Node, name: &str) -> f64 {
        node.attribute(name).unwrap().parse().unwrap()
    }

    #[test]
    fn well_formed_svg_with_two_panels_a_line_and_markers_per_series() {
        let svg = two().to_svg().unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let root = document.root_element();
        assert_eq!((root.tag_name().name(), root.tag_name().namespace()), ("svg", Some("http://www.w3.org/2000/svg")));
        assert!(number(root, "height") > PLOT_HEIGHT && number(root, "width") == WIDTH);
        let texts: Vec<&str> = document.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).collect();
        for expected in ["all_reduce, 2 ranks, 1 GPU (H100) on vm", "float sum · out-of-place columns", "oxccl", "NCCL <2.28> & \"best\"", "busbw (GB/s)", "message size (bytes, log scale)", "a: a.txt", "8 B", "512 KiB", "10 µs", "1 ms"] {
            assert!(texts.contains(&expected), "{expected:?} not among {texts:?}");
        }
        for id in ["busbw", "time"] {
            let panel = document.descendants().find(|n| n.attribute("id") == Some(id)).unwrap();
            let frame = panel.children().find(|n| n.has_tag_name("rect")).unwrap();
            let (left, top) = (number(frame, "x"), number(frame, "y"));
            let (right, bottom) = (left + number(frame, "width"), top + number(frame, "height"));
            let groups: Vec<_> = panel.children().filter(|n| n.attribute("class") == Some("series")).collect();
            assert_eq!(groups.iter().map(|g| g.attribute("data-series").unwrap()).collect::<Vec<_>>(), ["oxccl", "NCCL <2.28> & \"best\""]);
            for group in groups {
                let lines: Vec<_> = group.children().filter(|n| n.has_tag_name("polyline")).collect();
                assert_eq!(lines.len(), 1);
                let points = coordinates(lines[0]);
                assert_eq!(points.len(), 3);
                assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "drawn by size: {points:?}");
                assert!(points.iter().all(|&(x, y)| (left..=right).contains(&x) && (top..=bottom).contains(&y)), "{points:?} outside {left} {top} {right} {bottom}");
                let titles = group.descendants().filter(|n| n.has_tag_name("title")).count();
                assert_eq!(titles, 3, "a marker with its values per point");
            }
        }
    }

    #[test]
    fn points_sit_where_their_values_say() {
        let svg = two().to_svg().unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let line = |panel: &str, series: usize| {
            let group = document.descendants().find(|n| n.attribute("id") == Some(panel)).unwrap();
            let series = group.children().filter(|n| n.attribute("class") == Some("series")).nth(series).unwrap();
            coordinates(series.children().find(|n| n.has_tag_name("polyline")).unwrap())
        };
        // busbw: 0..4 GB/s (4 is a round top); oxccl's 4 GB/s at the top, 0 at the bottom.
        let top = line("busbw", 0)[2].1;
        let bottom = line("busbw", 0)[0].1;
        assert!((bottom - top - PLOT_HEIGHT).abs() < 0.11, "{top} {bottom}");
        assert!((line("busbw", 1)[2].1 - (bottom - 2.5 / 4.0 * PLOT_HEIGHT)).abs() < 0.11);
        // time: 10 µs .. 1 ms on a log axis: 100 µs would sit half way.
        let time = line("time", 0);
        assert!((time[0].1 - bottom).abs() < 0.11 && (time[2].1 - top).abs() < 0.11, "{time:?}");
        let nccl = line("time", 1);
        let expected = bottom - (30f64.log10() - 1.0) / 2.0 * PLOT_HEIGHT;
        assert!((nccl[1].1 - expected).abs() < 0.11, "{nccl:?} {expected}");
        // Sizes on a log axis: 1 KiB lies 7/17 of the way from 8 B to 1 MiB.
        let (x8, x1k, x1m) = (time[0].0, time[1].0, time[2].0);
        assert!(((x1k - x8) / (x1m - x8) - 7.0 / 17.0).abs() < 0.002);
    }

    #[test]
    fn what_cannot_be_drawn_is_said() {
        let zero = chart(vec![Series { label: "z".into(), points: vec![point(0, 5.0, 0.0), point(64, 0.0, 0.0), point(128, 6.0, 0.1)] }]);
        let svg = zero.to_svg().unwrap();
        assert!(svg.contains("z: 1 row of 0 bytes not drawn (log size axis)"), "{svg}");
        assert!(svg.contains("z: 1 point not in the time panel"), "{svg}");
        roxmltree::Document::parse(&svg).unwrap();
        assert_eq!(chart(vec![]).to_svg().unwrap_err().to_string(), "\"all_reduce, 2 ranks, 1 GPU (H100) on vm\": nothing to draw: no series");
        let only_zero = chart(vec![Series { label: "z".into(), points: vec![point(0, 5.0, 0.0)] }]);
        assert!(only_zero.to_svg().unwrap_err().to_string().starts_with("series \"z\" has no point a log size axis can show"));
    }

    #[test]
    fn many_series_wrap_the_legend_and_keep_their_shapes() {
        let series: Vec<Series> = (0..9).map(|i| Series { label: format!("a rather long series label number {i}"), points: vec![point(8, 10.0 + f64::from(i), 0.0)] }).collect();
        let svg = chart(series).to_svg().unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let legend = document.descendants().find(|n| n.attribute("id") == Some("legend")).unwrap();
        let rows: Vec<f64> = legend.children().filter(|n| n.has_tag_name("line")).map(|n| number(n, "y1")).collect();
        assert_eq!(rows.len(), 9);
        assert!(rows.windows(2).all(|w| w[0] <= w[1]) && rows[0] < rows[8], "{rows:?}");
        let shapes: Vec<&str> = legend.children().filter(|n| n.has_tag_name("circle") || n.has_tag_name("rect") || n.has_tag_name("path")).map(|n| n.tag_name().name()).collect();
        assert_eq!(shapes, ["circle", "rect", "path", "path", "path", "circle", "circle", "rect", "path"]);
    }

    #[test]
    fn long_lines_wrap_at_spaces() {
        let line = ["word"; 60].join(" ");
        let lines = wrap(&line);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= WRAP), "{lines:?}");
        assert_eq!(lines.join(" "), line);
        assert_eq!(escape("a<b & 'c' \"d\">"), "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;");
    }
}
