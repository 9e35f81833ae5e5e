//! Loss curves as SVG: one polyline per series over the steps, axes with
//! tick labels, a legend.

use std::fmt::Write;

/// A named series of `(step, value)` points.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: &'a [(f64, f64)],
    pub color: &'a str,
}

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// An SVG document plotting `series` under `title`.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 == x0 {
        x1 = x0 + 1.0;
    }
    y0 = y0.min(0.0);
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| TOP + (1.0 - (y - y0) / (y1 - y0)) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    // Axes and ticks.
    let _ = writeln!(
        s,
        r#"<path d="M{LEFT},{TOP} V{} H{}" stroke="black" fill="none"/>"#,
        H - BOTTOM,
        W - RIGHT
    );
    for k in 0..=5 {
        let f = k as f64 / 5.0;
        let (xv, yv) = (x0 + f * (x1 - x0), y0 + f * (y1 - y0));
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            px(xv),
            H - BOTTOM + 18.0,
            tick(xv)
        );
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{}</text><path d="M{LEFT},{:.1} H{}" stroke="#ddd"/>"##,
            LEFT - 6.0,
            py(yv) + 4.0,
            tick(yv),
            py(yv),
            W - RIGHT
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        W / 2.0,
        H - 12.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        H / 2.0,
        H / 2.0,
        esc(y_label)
    );
    for (i, ser) in series.iter().enumerate() {
        let pts: Vec<String> = ser
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" stroke="{}" stroke-width="1.5" fill="none"/>"#,
            pts.join(" "),
            ser.color
        );
        let ly = TOP + 10.0 + 16.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<path d="M{},{ly} h20" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            W - RIGHT - 150.0,
            ser.color,
            W - RIGHT - 124.0,
            ly + 4.0,
            esc(ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn tick(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
