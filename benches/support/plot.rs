// Each bench includes this module for the charts it draws, so some go unused in each.
#![allow(dead_code)]

//! SVG plots for the benchmarks: line charts and grouped bars, each in a panel of one picture.
//! Standard library only; the benches write their plot under `docs/bench/`, where the README shows
//! it. Deterministic for deterministic figures: a rerun writes the same file.

use std::fmt::Write as _;

/// Distinct colours, in the order series take them.
pub const PALETTE: [&str; 8] = [
    "#2b7bd9", "#d9822b", "#2e9e6b", "#7a4fd1", "#d64545", "#8a8f98", "#c4a000", "#17a2b8",
];

/// One picture of panels side by side.
pub struct Picture {
    width: f64,
    height: f64,
    body: String,
}

/// A rectangle of the picture a chart draws in.
#[derive(Clone, Copy)]
pub struct Panel {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// A named line (or set of points) of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Labels beside the points (e.g. a parameter's value), or none.
    pub labels: Vec<String>,
}

/// Axes of a chart: what each says and where it starts and ends.
pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x: (f64, f64),
    pub y: (f64, f64),
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Tick values across `[low, high]`: about five, on round numbers.
fn ticks(low: f64, high: f64) -> Vec<f64> {
    let span = (high - low).max(f64::EPSILON);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|step| span / step <= 6.0)
        .unwrap_or(10.0 * magnitude);
    let mut value = (low / step).ceil() * step;
    let mut values = Vec::new();
    while value <= high + step * 1e-9 {
        values.push(value);
        value += step;
    }
    values
}

fn figure(value: f64) -> String {
    if value.abs() >= 100.0 || value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

impl Picture {
    pub fn new(width: f64, height: f64) -> Self {
        Self {
            width,
            height,
            body: String::new(),
        }
    }

    /// Draws the axes, grid and labels of a chart in `panel`; returns the mapping from data to
    /// picture coordinates.
    fn frame(
        &mut self,
        panel: Panel,
        axes: &Axes<'_>,
        x_ticks: bool,
    ) -> impl Fn(f64, f64) -> (f64, f64) {
        let (left, right, top, bottom) = (56.0, 12.0, 30.0, 40.0);
        let plot = Panel {
            x: panel.x + left,
            y: panel.y + top,
            width: panel.width - left - right,
            height: panel.height - top - bottom,
        };
        let (x0, x1) = axes.x;
        let (y0, y1) = axes.y;
        let map = move |x: f64, y: f64| {
            (
                plot.x + (x - x0) / (x1 - x0) * plot.width,
                plot.y + plot.height - (y - y0) / (y1 - y0) * plot.height,
            )
        };
        let b = &mut self.body;
        let _ = write!(
            b,
            r##"<text x="{:.1}" y="{:.1}" font-size="13" font-weight="600">{}</text>"##,
            panel.x + 8.0,
            panel.y + 18.0,
            escape(axes.title)
        );
        for value in ticks(y0, y1) {
            let (_, y) = map(x0, value);
            let _ = write!(
                b,
                r##"<line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e3e7ec"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#6b7480">{}</text>"##,
                plot.x,
                plot.x + plot.width,
                plot.x - 4.0,
                y + 3.0,
                figure(value)
            );
        }
        for value in ticks(x0, x1).into_iter().filter(|_| x_ticks) {
            let (x, _) = map(value, y0);
            let _ = write!(
                b,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#c9cfd6"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#6b7480">{}</text>"##,
                plot.y + plot.height,
                plot.y + plot.height + 4.0,
                plot.y + plot.height + 15.0,
                figure(value)
            );
        }
        let _ = write!(
            b,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#c9cfd6"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#1d2430">{}</text><text transform="translate({:.1} {:.1}) rotate(-90)" font-size="11" text-anchor="middle" fill="#1d2430">{}</text>"##,
            plot.x,
            plot.y,
            plot.width,
            plot.height,
            plot.x + plot.width / 2.0,
            plot.y + plot.height + 32.0,
            escape(axes.x_label),
            panel.x + 14.0,
            plot.y + plot.height / 2.0,
            escape(axes.y_label)
        );
        map
    }

    /// Lines through each series' points (with a dot at each labelled point), a legend, and
    /// optionally a dashed reference line at `reference.0` named `reference.1`.
    pub fn lines(
        &mut self,
        panel: Panel,
        axes: &Axes<'_>,
        series: &[Series],
        reference: Option<(f64, &str)>,
    ) {
        let map = self.frame(panel, axes, true);
        let b = &mut self.body;
        if let Some((value, name)) = reference {
            let (x0, y) = map(axes.x.0, value);
            let (x1, _) = map(axes.x.1, value);
            let _ = write!(
                b,
                r##"<line x1="{x0:.1}" x2="{x1:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#1d2430" stroke-dasharray="5 4"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#1d2430">{}</text>"##,
                x1 - 4.0,
                y - 4.0,
                escape(name)
            );
        }
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let points: Vec<String> = s
                .points
                .iter()
                .map(|&(x, y)| {
                    let (px, py) = map(x, y);
                    format!("{px:.1},{py:.1}")
                })
                .collect();
            let _ = write!(
                b,
                r##"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.8"/>"##,
                points.join(" ")
            );
            // Labels alternate above and below their points, so that close points stay legible.
            for (k, (&(x, y), label)) in s.points.iter().zip(&s.labels).enumerate() {
                let (px, py) = map(x, y);
                let _ = write!(
                    b,
                    r##"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#1d2430">{}</text>"##,
                    px + 6.0,
                    if k % 2 == 0 { py - 6.0 } else { py + 14.0 },
                    escape(label)
                );
            }
            // The legend, top right inside the plot.
            let (lx, ly) = (
                panel.x + panel.width - 190.0,
                panel.y + 40.0 + 14.0 * i as f64,
            );
            let _ = write!(
                b,
                r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="4" fill="{colour}"/><text x="{:.1}" y="{ly:.1}" font-size="11" fill="#1d2430">{}</text>"##,
                ly - 5.0,
                lx + 16.0,
                escape(&s.name)
            );
        }
    }

    /// One group of bars per entry (a bar per value), side by side, with an optional dashed
    /// reference line.
    pub fn bar_groups(
        &mut self,
        panel: Panel,
        axes: &Axes<'_>,
        groups: &[(String, Vec<f64>)],
        reference: Option<(f64, &str)>,
    ) {
        let n = groups.len() as f64;
        let axes = Axes {
            x: (0.0, n),
            ..*axes
        };
        let map = self.frame(panel, &axes, false);
        let b = &mut self.body;
        for (g, (name, values)) in groups.iter().enumerate() {
            let colour = PALETTE[g % PALETTE.len()];
            let (gx0, _) = map(g as f64 + 0.08, 0.0);
            let (gx1, base) = map(g as f64 + 0.92, axes.y.0);
            let width = (gx1 - gx0) / values.len().max(1) as f64;
            for (i, &value) in values.iter().enumerate() {
                let (_, top) = map(0.0, value.min(axes.y.1));
                let _ = write!(
                    b,
                    r##"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: {}</title></rect>"##,
                    gx0 + i as f64 * width,
                    (width - 0.8).max(0.5),
                    (base - top).max(0.0),
                    escape(name),
                    figure(value)
                );
            }
            let _ = write!(
                b,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#1d2430">{}</text>"##,
                (gx0 + gx1) / 2.0,
                base + 26.0,
                escape(name)
            );
        }
        if let Some((value, name)) = reference {
            let (x0, y) = map(0.0, value);
            let (x1, _) = map(n, value);
            let _ = write!(
                b,
                r##"<line x1="{x0:.1}" x2="{x1:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#1d2430" stroke-dasharray="5 4"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#1d2430">{}</text>"##,
                x1 - 4.0,
                y - 4.0,
                escape(name)
            );
        }
    }

    /// A note under the panels.
    pub fn caption(&mut self, text: &str) {
        let _ = write!(
            self.body,
            r##"<text x="8" y="{:.1}" font-size="11" fill="#6b7480">{}</text>"##,
            self.height - 8.0,
            escape(text)
        );
    }

    /// Writes the picture to `docs/bench/{name}` in the repository, and says so.
    pub fn save(self, name: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/bench")
            .join(name);
        let svg = format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif"><rect width="{w}" height="{h}" fill="#ffffff"/>{}</svg>
"##,
            self.body,
            w = self.width,
            h = self.height
        );
        match std::fs::write(&path, svg) {
            Ok(()) => println!("\nplot: {}", path.display()),
            Err(error) => println!("\nplot not written to {}: {error}", path.display()),
        }
    }
}
