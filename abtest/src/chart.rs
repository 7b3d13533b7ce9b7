//! An SVG chart, written by hand (no plotting dependency): one column of panels per
//! connection mode × file size (titled `TLS ...` for a `--tls` run), two rows (req/s; httpd CPU µs per request), bars per MPM
//! grouped by client count, each bar the median with a min–max whisker.

use crate::mpm::MpmKind;
use crate::options::ConnMode;
use crate::plan::Cell;
use crate::report::{cell_label, Stat, Summary, Table};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Picks one statistic out of a summary.
type Metric = fn(&Summary) -> Stat;

/// Bar colour of each MPM (colour-blind-safe palette).
pub fn colour(k: MpmKind) -> &'static str {
    match k {
        MpmKind::Worker => "#0072b2",
        // The A/A half: the worker's hue, darker.
        MpmKind::WorkerAa => "#003c5f",
        MpmKind::Event => "#009e73",
        MpmKind::RworkerApr => "#e69f00",
        MpmKind::Rworker => "#d55e00",
        // rworker's hue, darker: the other keep-alive mode.
        MpmKind::RworkerThread => "#7f3700",
        MpmKind::RworkerPark => "#cc79a7",
        MpmKind::RworkerListener => "#56b4e9",
        MpmKind::RworkerParkBase => "#999999",
    }
}

/// A round upper bound for an axis: 1, 2, 2.5 or 5 × 10^n, at least `x`.
fn nice_ceiling(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= x {
            return m * p;
        }
    }
    10.0 * p
}

/// A tick label: at most 3 significant decimals, `k` for thousands (`37.5k`, `6.25k`, `12.5`).
fn short(x: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if x >= 1000.0 {
        format!("{}k", trim(format!("{:.2}", x / 1000.0)))
    } else {
        trim(format!("{x:.2}"))
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the chart. `title` goes on top, up to two lines (command line; date and machine).
pub fn svg(table: &Table, title: &str) -> String {
    // One panel per transport, mode and size (a run is all TLS or all plain).
    let panels: Vec<(bool, ConnMode, u64)> = table
        .keys()
        .map(|c| (c.tls, c.mode, c.size))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let clients: Vec<u32> = table
        .keys()
        .map(|c| c.clients)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mpms: Vec<MpmKind> = table
        .values()
        .flat_map(|row| row.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let metrics: [(&str, Metric); 2] = [
        ("req/s (higher is better)", |s| s.rps),
        ("httpd CPU µs / request (lower is better)", |s| s.cpu_us),
    ];

    let (pw, ph) = (250.0, 230.0); // panel size
    let (left, top, gap_x, gap_y) = (70.0, 120.0, 30.0, 75.0);
    let cols = panels.len().max(1) as f64;
    let width = (left + cols * (pw + gap_x) + 10.0).max(960.0);
    let height = top + 2.0 * (ph + gap_y) + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        esc("rworker A/B: bars = median over repetitions, whiskers = min–max")
    );
    let mut ty = 44.0;
    for line in title.lines().take(2) {
        let _ = writeln!(
            s,
            r##"<text x="{left}" y="{ty}" fill="#444">{}</text>"##,
            esc(line)
        );
        ty += 16.0;
    }
    // Legend.
    let mut lx = left;
    for &k in &mpms {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="78" width="14" height="14" fill="{}"/><text x="{}" y="90">{}</text>"#,
            colour(k),
            lx + 20.0,
            k.label()
        );
        lx += 40.0 + 8.0 * k.label().len() as f64;
    }

    for (row, (metric_name, metric)) in metrics.iter().enumerate() {
        let py = top + row as f64 * (ph + gap_y);
        let _ = writeln!(
            s,
            r#"<text x="14" y="{:.0}" transform="rotate(-90 14 {:.0})" text-anchor="middle" font-weight="bold">{}</text>"#,
            py + ph / 2.0,
            py + ph / 2.0,
            esc(metric_name)
        );
        for (col, &(tls, mode, size)) in panels.iter().enumerate() {
            let px = left + col as f64 * (pw + gap_x);
            // Panel title: the cell without its client count.
            let in_panel = |c: &Cell| c.tls == tls && c.mode == mode && c.size == size;
            let any_cell = table.keys().find(|c| in_panel(c));
            let name = any_cell.map_or(String::new(), |c| {
                cell_label(c)
                    .rsplit_once(" c=")
                    .map_or(String::new(), |(a, _)| a.to_string())
            });
            let _ = writeln!(
                s,
                r#"<text x="{:.0}" y="{:.0}" text-anchor="middle" font-weight="bold">{}</text>"#,
                px + pw / 2.0,
                py - 8.0,
                esc(&name)
            );
            let ymax = nice_ceiling(
                table
                    .iter()
                    .filter(|(c, _)| in_panel(c))
                    .flat_map(|(_, r)| r.values().map(|v| metric(v).max))
                    .filter(|x| x.is_finite())
                    .fold(0.0, f64::max),
            );
            let y = |v: f64| py + ph - (v / ymax).clamp(0.0, 1.0) * ph;
            // Grid and y ticks.
            for i in 0..=4 {
                let v = ymax * i as f64 / 4.0;
                let yy = y(v);
                let _ = writeln!(
                    s,
                    r##"<line x1="{px:.1}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{}</text>"##,
                    px + pw,
                    px - 4.0,
                    yy + 4.0,
                    short(v)
                );
            }
            let _ = writeln!(
                s,
                r##"<rect x="{px:.1}" y="{py:.1}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
            );
            let group_w = pw / clients.len().max(1) as f64;
            let bar_w = (group_w - 16.0) / mpms.len().max(1) as f64;
            for (gi, &c) in clients.iter().enumerate() {
                let gx = px + gi as f64 * group_w + 8.0;
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">c={c}</text>"#,
                    gx + (group_w - 16.0) / 2.0,
                    py + ph + 16.0
                );
                let Some((_, row)) = table.iter().find(|(k, _)| in_panel(k) && k.clients == c)
                else {
                    continue;
                };
                for (bi, &k) in mpms.iter().enumerate() {
                    let Some(sum) = row.get(&k) else { continue };
                    let st = metric(sum);
                    if !st.median.is_finite() {
                        continue;
                    }
                    let bx = gx + bi as f64 * bar_w;
                    let _ = writeln!(
                        s,
                        r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: median {:.1} (min {:.1}, max {:.1})</title></rect>"#,
                        y(st.median),
                        (bar_w - 1.0).max(1.0),
                        (py + ph - y(st.median)).max(0.0),
                        colour(k),
                        k.label(),
                        esc(&name),
                        st.median,
                        st.min,
                        st.max
                    );
                    let cx = bx + bar_w / 2.0 - 0.5;
                    let _ = writeln!(
                        s,
                        r##"<line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="#222" stroke-width="1.2"/>"##,
                        y(st.min),
                        y(st.max)
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(12_000.0), 20_000.0);
        assert_eq!(nice_ceiling(2.2), 2.5);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(short(37_500.0), "37.5k");
        assert_eq!(short(6_250.0), "6.25k");
        assert_eq!(short(12.5), "12.5");
        assert_eq!(short(100.0), "100");
    }
}
