//! A small line-chart renderer producing inline SVG (no scripts, no external fonts, no
//! network): axes with "nice" ticks, a linear or log2 x axis, lines with min-max whiskers,
//! hollow markers for flagged points, reference lines and a tooltip per point.

use std::fmt::Write as _;

/// How the x axis maps values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Logarithmic, base 2 (buffer sizes).
    Log2,
}

/// One point of a line.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// X value.
    pub x: f64,
    /// Y value (the median).
    pub y: f64,
    /// Lower whisker (min over repetitions).
    pub lo: f64,
    /// Upper whisker (max over repetitions).
    pub hi: f64,
    /// Drawn hollow (e.g. a time-capped run).
    pub hollow: bool,
    /// Tooltip text.
    pub tip: String,
}

/// One line.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// CSS colour.
    pub color: String,
    /// Dashed line.
    pub dashed: bool,
    /// Points, in x order.
    pub points: Vec<Point>,
}

/// A vertical or horizontal reference line with a label.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    /// Position on its axis.
    pub at: f64,
    /// Label drawn next to it.
    pub label: String,
    /// A horizontal line the y axis stretches to include (else it is drawn only when the
    /// data reach it).
    pub keep_in_view: bool,
}

/// A chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Pixel width.
    pub width: f64,
    /// Pixel height.
    pub height: f64,
    /// X axis label.
    pub x_label: String,
    /// X axis scale.
    pub x_scale: Scale,
    /// X ticks: (value, label).
    pub x_ticks: Vec<(f64, String)>,
    /// Y axis label.
    pub y_label: String,
    /// Top of the y axis (default: a nice value above the data).
    pub y_max: Option<f64>,
    /// Lines.
    pub series: Vec<Series>,
    /// Vertical reference lines.
    pub vlines: Vec<Marker>,
    /// Horizontal reference lines (drawn only when inside the y range).
    pub hlines: Vec<Marker>,
}

/// Escape text for XML/HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k at or above `v` (1 for
/// non-positive input): a round axis top that wastes little of the plot.
pub fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v * 0.999_999 {
            return m * p;
        }
    }
    10.0 * p
}

/// A compact number for tick labels: `0`, `2.5`, `250`, `1000`.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

const PAD_L: f64 = 52.0;
const PAD_R: f64 = 12.0;
const PAD_T: f64 = 28.0;
const PAD_B: f64 = 40.0;

impl Chart {
    fn xmap(&self) -> impl Fn(f64) -> f64 {
        let f = |v: f64, s: Scale| match s {
            Scale::Linear => v,
            Scale::Log2 => v.max(f64::MIN_POSITIVE).log2(),
        };
        let scale = self.x_scale;
        let xs: Vec<f64> = self
            .x_ticks
            .iter()
            .map(|t| t.0)
            .chain(
                self.series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.x)),
            )
            .map(|v| f(v, scale))
            .collect();
        let lo = xs.iter().copied().fold(f64::MAX, f64::min);
        let hi = xs.iter().copied().fold(f64::MIN, f64::max);
        let (lo, hi) = if lo >= hi {
            (lo - 1.0, lo + 1.0)
        } else {
            (lo, hi)
        };
        let span = hi - lo;
        let (lo, hi) = (lo - span * 0.04, hi + span * 0.04);
        let (x0, w) = (PAD_L, self.width - PAD_L - PAD_R);
        move |v| x0 + (f(v, scale) - lo) / (hi - lo) * w
    }

    /// The top of the y axis.
    pub fn y_top(&self) -> f64 {
        self.y_max.unwrap_or_else(|| {
            let m = self
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.hi.max(p.y)))
                .chain(self.hlines.iter().filter(|m| m.keep_in_view).map(|m| m.at))
                .fold(0.0, f64::max);
            nice_ceil(m * 1.05)
        })
    }

    /// Render to an `<svg>` element.
    pub fn render(&self) -> String {
        let (w, h) = (self.width, self.height);
        let top = self.y_top();
        let plot_h = h - PAD_T - PAD_B;
        let ymap = |v: f64| PAD_T + plot_h - (v / top).clamp(0.0, 1.05) * plot_h;
        let xmap = self.xmap();
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" class="chart"><title>{}</title>"#,
            esc(&self.title)
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="16" class="ct">{}</text>"#,
            PAD_L,
            esc(&self.title)
        );
        // Grid and y ticks.
        for i in 0..=5 {
            let v = top * f64::from(i) / 5.0;
            let y = ymap(v);
            let _ = write!(
                s,
                r#"<line x1="{PAD_L}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="yt">{}</text>"#,
                w - PAD_R,
                PAD_L - 4.0,
                y + 3.5,
                tick_label(v)
            );
        }
        // X ticks.
        for (v, label) in &self.x_ticks {
            let x = xmap(*v);
            let _ = write!(
                s,
                r#"<line x1="{x:.1}" x2="{x:.1}" y1="{}" y2="{}" class="axis"/><text x="{x:.1}" y="{}" class="xt">{}</text>"#,
                PAD_T + plot_h,
                PAD_T + plot_h + 4.0,
                PAD_T + plot_h + 15.0,
                esc(label)
            );
        }
        // Axes.
        let _ = write!(
            s,
            r#"<line x1="{PAD_L}" x2="{PAD_L}" y1="{PAD_T}" y2="{}" class="axis"/><line x1="{PAD_L}" x2="{}" y1="{}" y2="{}" class="axis"/>"#,
            PAD_T + plot_h,
            w - PAD_R,
            PAD_T + plot_h,
            PAD_T + plot_h
        );
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" class="xl">{}</text><text transform="translate(12 {:.1}) rotate(-90)" class="yl">{}</text>"#,
            PAD_L + (w - PAD_L - PAD_R) / 2.0,
            h - 6.0,
            esc(&self.x_label),
            PAD_T + plot_h / 2.0,
            esc(&self.y_label)
        );
        for m in &self.vlines {
            let x = xmap(m.at);
            if x < PAD_L || x > w - PAD_R {
                continue;
            }
            let _ = write!(
                s,
                r#"<line x1="{x:.1}" x2="{x:.1}" y1="{PAD_T}" y2="{}" class="ref"/><text x="{:.1}" y="{}" class="rl">{}</text>"#,
                PAD_T + plot_h,
                x + 3.0,
                PAD_T + 10.0,
                esc(&m.label)
            );
        }
        for m in &self.hlines {
            if m.at > top || m.at <= 0.0 {
                continue;
            }
            let y = ymap(m.at);
            let _ = write!(
                s,
                r#"<line x1="{PAD_L}" x2="{}" y1="{y:.1}" y2="{y:.1}" class="ref"/><text x="{}" y="{:.1}" class="rl" text-anchor="end">{}</text>"#,
                w - PAD_R,
                w - PAD_R - 2.0,
                y - 3.0,
                esc(&m.label)
            );
        }
        for se in &self.series {
            if se.points.is_empty() {
                continue;
            }
            let path: Vec<String> = se
                .points
                .iter()
                .map(|p| format!("{:.1},{:.1}", xmap(p.x), ymap(p.y)))
                .collect();
            let _ = write!(
                s,
                r#"<g class="series"><title>{}</title><polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
                esc(&se.name),
                path.join(" "),
                esc(&se.color),
                if se.dashed {
                    r#" stroke-dasharray="6 3""#
                } else {
                    ""
                }
            );
            for p in &se.points {
                let (x, y) = (xmap(p.x), ymap(p.y));
                if p.hi > p.lo {
                    let _ = write!(
                        s,
                        r#"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="{}" stroke-width="1.2"/>"#,
                        ymap(p.lo),
                        ymap(p.hi),
                        esc(&se.color)
                    );
                }
                let fill = if p.hollow { "white" } else { se.color.as_str() };
                let _ = write!(
                    s,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{}" stroke="{}" stroke-width="1.5"><title>{}</title></circle>"#,
                    esc(fill),
                    esc(&se.color),
                    esc(&p.tip)
                );
            }
            s.push_str("</g>");
        }
        s.push_str("</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "No tuning, 25 ms <test>".into(),
            width: 320.0,
            height: 220.0,
            x_label: "parallel streams".into(),
            x_scale: Scale::Linear,
            x_ticks: vec![(1.0, "1".into()), (8.0, "8".into())],
            y_label: "Mbit/s".into(),
            y_max: None,
            series: vec![Series {
                name: "kernel".into(),
                color: "#1f77b4".into(),
                dashed: false,
                points: vec![
                    Point {
                        x: 1.0,
                        y: 100.0,
                        lo: 90.0,
                        hi: 110.0,
                        hollow: false,
                        tip: "P=1".into(),
                    },
                    Point {
                        x: 8.0,
                        y: 430.0,
                        lo: 430.0,
                        hi: 430.0,
                        hollow: true,
                        tip: "P=8 capped".into(),
                    },
                ],
            }],
            vlines: vec![],
            hlines: vec![Marker {
                keep_in_view: false,
                at: 1000.0,
                label: "link".into(),
            }],
        }
    }

    #[test]
    fn nice_ceil_rounds_up_to_a_round_value_close_above() {
        assert_eq!(nice_ceil(430.0), 500.0);
        assert_eq!(nice_ceil(1000.0), 1000.0);
        assert_eq!(nice_ceil(1005.0), 1200.0);
        assert_eq!(nice_ceil(210.0), 250.0);
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(1.7), 2.0);
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(250.0), "250");
    }

    #[test]
    fn chart_escapes_text_and_draws_points_whiskers_and_hollow_markers() {
        let svg = chart().render();
        assert!(svg.starts_with("<svg"));
        assert!(svg.ends_with("</svg>"));
        assert!(svg.contains("&lt;test&gt;"));
        assert!(!svg.contains("<test>"));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(
            svg.contains(r#"fill="white""#),
            "hollow point for a capped run"
        );
        // One whisker: the second point has no range.
        assert_eq!(svg.matches(r#"stroke-width="1.2""#).count(), 1);
        // The link line at 1000 is above the 500 top: not drawn.
        assert!(!svg.contains(">link<"));
        assert_eq!(chart().y_top(), 500.0);
        // No script, no external reference.
        assert!(!svg.contains("<script"));
        assert!(!svg.contains("href"));
    }

    #[test]
    fn log_axis_spaces_powers_of_two_evenly() {
        let mut c = chart();
        c.x_scale = Scale::Log2;
        c.x_ticks = vec![
            (8192.0, "8K".into()),
            (65536.0, "64K".into()),
            (524288.0, "512K".into()),
        ];
        let f = c.xmap();
        let (a, b, d) = (f(8192.0), f(65536.0), f(524288.0));
        assert!(((b - a) - (d - b)).abs() < 1e-6);
    }
}
