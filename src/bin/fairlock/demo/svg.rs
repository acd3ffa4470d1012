//! A timeline picture (SVG) of lock requests: one panel per run, side by
//! side on one time scale; in each a row per request, in arrival order,
//! with a mark where it asked, a thin bar while it waited and a thick bar
//! while it held the lock; a legend below.

use std::fmt::Write as _;

/// What to draw.
pub struct Picture {
    pub title: String,
    /// A second, smaller line under the title.
    pub note: String,
    /// The names of the row groups (colours), for the legend.
    pub groups: Vec<String>,
    pub panels: Vec<Panel>,
}

/// One run.
pub struct Panel {
    pub title: String,
    /// Top to bottom.
    pub rows: Vec<Row>,
}

/// One request, in milliseconds since the run's start.
pub struct Row {
    pub label: String,
    /// Index into [`Picture::groups`].
    pub group: usize,
    pub asked_ms: u64,
    pub granted_ms: u64,
    pub released_ms: u64,
    /// Drawn with a red edge (granted out of order).
    pub flagged: bool,
    /// Shown when pointing at the row.
    pub tooltip: String,
}

const LABEL_W: u64 = 64;
const PLOT_W: u64 = 520;
const GAP: u64 = 36;
const TOP: u64 = 70;
/// Rows shrink to fit this height, down to [`MIN_ROW`].
const ROWS_H: u64 = 640;
const MAX_ROW: u64 = 18;
const MIN_ROW: u64 = 4;
const LEGEND_H: u64 = 70;
const FLAG: &str = "#d62728";

/// Colours per group, repeating.
const COLOURS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948",
];

fn colour(group: usize) -> &'static str {
    COLOURS[group % COLOURS.len()]
}

/// The picture as an SVG document.
pub fn render(p: &Picture) -> String {
    let rows = p.panels.iter().map(|p| p.rows.len()).max().unwrap_or(0);
    let n = u64::try_from(rows.max(1)).unwrap_or(u64::MAX);
    let row = (ROWS_H / n).clamp(MIN_ROW, MAX_ROW);
    let end = p
        .panels
        .iter()
        .flat_map(|p| p.rows.iter().map(|r| r.released_ms))
        .max()
        .unwrap_or(1)
        .max(1);
    let panels = u64::try_from(p.panels.len().max(1)).unwrap_or(1);
    let width = panels * (LABEL_W + PLOT_W + GAP) + 10;
    let axis_y = TOP + n * row + 16;
    let height = axis_y + 20 + LEGEND_H;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"14\">{}</text>\n\
         <text x=\"10\" y=\"36\" fill=\"#555\">{}</text>",
        escape(&p.title),
        escape(&p.note)
    );
    for (i, panel) in p.panels.iter().enumerate() {
        let left = 10 + u64::try_from(i).unwrap_or(0) * (LABEL_W + PLOT_W + GAP);
        let x0 = left + LABEL_W;
        let x = |ms: u64| x0 + ms * PLOT_W / end;
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{}</text>",
            TOP - 12,
            escape(&panel.title)
        );
        for (j, r) in panel.rows.iter().enumerate() {
            let y = TOP + u64::try_from(j).unwrap_or(0) * row;
            let mid = y + row / 2;
            if row >= 10 {
                let _ = writeln!(
                    s,
                    "<text x=\"{left}\" y=\"{}\" font-size=\"{}\">{}</text>",
                    mid + 4,
                    (row - 4).min(11),
                    escape(&r.label)
                );
            }
            let (asked, granted) = (x(r.asked_ms), x(r.granted_ms));
            let released = x(r.released_ms).max(granted + 2);
            let c = colour(r.group);
            let edge = if r.flagged {
                format!(" stroke=\"{FLAG}\" stroke-width=\"1.5\"")
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "<g><title>{}</title>\n\
                 <line class=\"wait\" x1=\"{asked}\" y1=\"{mid}\" x2=\"{granted}\" y2=\"{mid}\" \
                 stroke=\"{c}\" stroke-width=\"1.5\"/>\n\
                 <rect class=\"hold\" x=\"{granted}\" y=\"{}\" width=\"{}\" height=\"{}\" \
                 fill=\"{c}\"{edge}/>\n\
                 <line class=\"arrival\" x1=\"{asked}\" y1=\"{}\" x2=\"{asked}\" y2=\"{}\" \
                 stroke=\"black\" stroke-width=\"2\"/></g>",
                escape(&r.tooltip),
                y + 2,
                released - granted,
                row.saturating_sub(4).max(2),
                y + 1,
                y + row - 1,
            );
        }
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#999\"/>\n\
             <text x=\"{x0}\" y=\"{2}\">0 ms</text>\n\
             <text x=\"{1}\" y=\"{2}\" text-anchor=\"end\">{end} ms</text>",
            axis_y - 12,
            x0 + PLOT_W,
            axis_y + 2,
        );
    }
    legend(&mut s, p, axis_y + 24);
    s.push_str("</svg>\n");
    s
}

/// The legend: the three marks of a row, the red edge, the colours.
fn legend(s: &mut String, p: &Picture, top: u64) {
    let y = top + 10;
    let _ = writeln!(
        s,
        "<g class=\"legend\">\n\
         <line x1=\"20\" y1=\"{}\" x2=\"20\" y2=\"{}\" stroke=\"black\" stroke-width=\"2\"/>\n\
         <text x=\"28\" y=\"{}\">asked (arrival)</text>\n\
         <line x1=\"140\" y1=\"{y}\" x2=\"180\" y2=\"{y}\" stroke=\"#555\" stroke-width=\"1.5\"/>\n\
         <text x=\"186\" y=\"{}\">waiting</text>\n\
         <rect x=\"250\" y=\"{}\" width=\"40\" height=\"10\" fill=\"#555\"/>\n\
         <text x=\"296\" y=\"{}\">holding the lock</text>\n\
         <rect x=\"410\" y=\"{}\" width=\"40\" height=\"10\" fill=\"white\" stroke=\"{FLAG}\" \
         stroke-width=\"1.5\"/>\n\
         <text x=\"456\" y=\"{}\">granted ahead of an earlier arrival</text>",
        y - 6,
        y + 6,
        y + 4,
        y + 4,
        y - 5,
        y + 4,
        y - 5,
        y + 4,
    );
    let y = top + 36;
    let mut x = 20;
    for (g, name) in p.groups.iter().enumerate().take(COLOURS.len()) {
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 5,
            colour(g),
            x + 20,
            y + 4,
            escape(name)
        );
        x += 30 + 7 * u64::try_from(name.len()).unwrap_or(0);
    }
    if p.groups.len() > COLOURS.len() {
        let _ = writeln!(s, "<text x=\"{x}\" y=\"{}\">(colours repeat)</text>", y + 4);
    }
    s.push_str("</g>\n");
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
