//! Line charts as SVG for the scale curves: x on a log scale (queue
//! length, keys, processes), y linear from zero, one line per series.

use std::fmt::Write;

/// One line of a chart.
pub struct Series {
    pub name: String,
    /// `(x, y)`, x > 0.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed: a floor or a peer, not fairlock.
    pub dashed: bool,
}

/// A chart: its title, axis labels and lines.
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f",
];

impl Chart {
    /// The chart as an SVG document.
    pub fn svg(&self) -> String {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1) = (f64::MAX, f64::MIN);
        let mut y1 = 0.0f64;
        for &(x, y) in points() {
            (x0, x1, y1) = (x0.min(x), x1.max(x), y1.max(y));
        }
        if x0 > x1 {
            (x0, x1) = (1.0, 10.0);
        }
        let (lx0, lx1) = (
            x0.log10().floor(),
            x1.log10().ceil().max(x0.log10().floor() + 1.0),
        );
        let y1 = nice(y1 * 1.1);
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let px = |x: f64| LEFT + (x.log10() - lx0) / (lx1 - lx0) * pw;
        let py = |y: f64| TOP + ph - y / y1 * ph;
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
            LEFT + pw / 2.0,
            esc(&self.title)
        );
        // Axes, grid and ticks.
        let mut e = lx0;
        while e <= lx1 {
            let x = px(10f64.powf(e));
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 18.0,
                thousands(10f64.powf(e))
            );
            e += 1.0;
        }
        for i in 0..=5 {
            let y = y1 * f64::from(i) / 5.0;
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
                py(y),
                LEFT + pw,
                LEFT - 6.0,
                py(y) + 4.0,
                thousands(y)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>
<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
            LEFT + pw / 2.0,
            H - 16.0,
            esc(&self.x_label),
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        // Lines and the legend.
        for (i, series) in self.series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let path: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
                path.join(" ")
            );
            for &(x, y) in &series.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#,
                    px(x),
                    py(y)
                );
            }
            let ly = TOP + 10.0 + 20.0 * i as f64;
            let lx = LEFT + pw + 14.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 24.0,
                lx + 30.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// The next round number at or above `v` (1, 2 or 5 times a power of
/// ten).
fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

/// `12,345` for 12345.0; one decimal below 10.
fn thousands(v: f64) -> String {
    if v < 10.0 && v.fract() != 0.0 {
        return format!("{v:.1}");
    }
    let digits = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
