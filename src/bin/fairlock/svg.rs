//! The demo's timeline picture: one panel per mode, side by side; one lane
//! per process; a bar per hold interval, labelled with its arrival slot.

use std::fmt::Write as _;

use crate::args::DemoArgs;
use crate::demo::Grant;

const LANE: u64 = 28;
const TOP: u64 = 60;
const LEFT: u64 = 90;
const PANEL_W: u64 = 560;
const GAP: u64 = 40;

/// Colours per process, repeating.
const COLOURS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1",
];

pub fn timeline(o: &DemoArgs, runs: &[(String, Vec<Grant>)]) -> String {
    let end = runs
        .iter()
        .flat_map(|(_, g)| g.iter().map(|g| g.released_ms))
        .max()
        .unwrap_or(1)
        .max(1);
    let panels = u64::try_from(runs.len()).unwrap_or(1);
    let width = LEFT + panels * (PANEL_W + GAP);
    let height = TOP + o.processes * LANE + 50;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"20\" font-size=\"14\">fairlock demo: {} processes x {} tasks, \
         arrivals every {} ms, holds {} ms; bars are hold intervals, labels the arrival order</text>",
        o.processes, o.tasks, o.interval_ms, o.hold_ms
    );
    for (i, (mode, grants)) in runs.iter().enumerate() {
        let x0 = LEFT + u64::try_from(i).unwrap_or(0) * (PANEL_W + GAP);
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{mode} mode</text>",
            TOP - 12
        );
        for p in 0..o.processes {
            let y = TOP + p * LANE;
            if i == 0 {
                let _ = writeln!(
                    s,
                    "<text x=\"10\" y=\"{}\">process {p}</text>",
                    y + LANE / 2 + 4
                );
            }
            let _ = writeln!(
                s,
                "<line x1=\"{x0}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>",
                y + LANE,
                x0 + PANEL_W,
                y + LANE
            );
        }
        let x = |ms: u64| x0 + ms * PANEL_W / end;
        for g in grants {
            let y = TOP + g.process * LANE + 4;
            let colour = COLOURS[usize::try_from(g.process).unwrap_or(0) % COLOURS.len()];
            let (x1, x2) = (x(g.granted_ms), x(g.released_ms).max(x(g.granted_ms) + 2));
            let _ = writeln!(
                s,
                "<rect x=\"{x1}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{colour}\">\
                 <title>process {} task {}: arrived {} ms, held {}-{} ms, token {}</title></rect>",
                x2 - x1,
                LANE - 8,
                g.process,
                g.task,
                g.arrival_ms,
                g.granted_ms,
                g.released_ms,
                g.token
            );
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"white\">{}</text>",
                x1 + 2,
                y + LANE / 2,
                g.slot
            );
        }
        let axis_y = TOP + o.processes * LANE + 16;
        let _ = writeln!(
            s,
            "<text x=\"{x0}\" y=\"{axis_y}\">0 ms</text><text x=\"{}\" y=\"{axis_y}\" \
             text-anchor=\"end\">{end} ms</text>",
            x0 + PANEL_W
        );
    }
    s.push_str("</svg>\n");
    s
}
