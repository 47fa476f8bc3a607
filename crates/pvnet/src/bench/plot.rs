//! The report's plots, as SVG. plotters with only its SVG backend: text goes into the SVG as
//! `<text>` elements and the viewer picks the font, so nothing here needs a font file or
//! fontconfig.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordu32};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::configs;
use super::pktsize;
use super::summary::ConfigSummary;

/// Draws the series' legend of chart `$ch` at `$pos` in `$size`-point type, on a white box.
macro_rules! legend {
    ($ch:expr, $pos:expr, $size:expr) => {
        $ch.configure_series_labels()
            .position($pos)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font((FONT, $size))
            .draw()
            .map_err(err)?
    };
}

const NATIVE: RGBColor = RGBColor(0x88, 0x88, 0x88);
const PV: RGBColor = RGBColor(0x3b, 0x6e, 0xa8);
const DRIVER: RGBColor = RGBColor(0x3b, 0x6e, 0xa8);
const GUEST: RGBColor = RGBColor(0xe0, 0x8a, 0x2c);
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing: {e:?}")
}

fn label_style(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom))
}

/// An axis tick: no decimals for large values.
fn axis_number(v: f64) -> String {
    if v == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The upper end of a value axis: a bit above the largest value.
fn top(v: impl Iterator<Item = f64>) -> f64 {
    let m = v.fold(0.0, f64::max);
    if m > 0.0 {
        m * 1.15
    } else {
        1.0
    }
}

/// Bars of one metric per configuration: the median, a whisker from min to max, the value.
fn bar_chart(
    area: &DrawingArea<SVGBackend, Shift>,
    cs: &[ConfigSummary],
    key: &str,
    title: &str,
    unit: &str,
) -> Result<()> {
    let stat = |c: &ConfigSummary| c.stats[key];
    let ymax = top(cs.iter().filter_map(|c| stat(c).map(|s| s.max)));
    let names: Vec<String> = cs.iter().map(|c| c.name.clone()).collect();
    let mut ch = bar_axes(area, title, unit, &names, ymax)?;
    for (i, c) in cs.iter().enumerate() {
        let Some(s) = stat(c) else { continue };
        let i = i as u32;
        let color = if configs::is_pv(&c.name) { PV } else { NATIVE };
        ch.draw_series([bar(i, 0.0, s.median, color)])
            .map_err(err)?;
        whisker(&mut ch, i, s.min, s.max)?;
        ch.draw_series([EmptyElement::at((SegmentValue::CenterOf(i), s.max))
            + Text::new(format!("{:.0}", s.median), (0, -4), label_style(12))])
            .map_err(err)?;
    }
    Ok(())
}

/// The axes of a bar chart: one segment per configuration, named below it.
fn bar_axes<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    unit: &str,
    names: &[String],
    ymax: f64,
) -> Result<BarChart<'a, 'b>> {
    let n = names.len() as u32;
    let mut ch = ChartBuilder::on(area)
        .caption(title, (FONT, 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|v| axis_number(*v))
        .y_desc(unit)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    Ok(ch)
}

/// The bar of configuration `i` from `lo` to `hi`.
fn bar(i: u32, lo: f64, hi: f64, color: RGBColor) -> Rectangle<(SegmentValue<u32>, f64)> {
    let mut r = Rectangle::new(
        [
            (SegmentValue::Exact(i), lo),
            (SegmentValue::Exact(i + 1), hi),
        ],
        color.filled(),
    );
    r.set_margin(0, 0, 8, 8);
    r
}

type BarChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<SegmentedCoord<RangedCoordu32>, RangedCoordf64>>;

fn whisker(ch: &mut BarChart<'_, '_>, i: u32, min: f64, max: f64) -> Result<()> {
    if max <= min {
        return Ok(());
    }
    let x = || SegmentValue::CenterOf(i);
    ch.draw_series([PathElement::new(
        vec![(x(), min), (x(), max)],
        BLACK.stroke_width(1),
    )])
    .map_err(err)?;
    for y in [min, max] {
        ch.draw_series([EmptyElement::at((x(), y))
            + PathElement::new(vec![(-5, 0), (5, 0)], BLACK.stroke_width(1))])
            .map_err(err)?;
    }
    Ok(())
}

/// `throughput.svg`: stream throughput per configuration.
pub fn throughput(path: &Path, cs: &[ConfigSummary], reps: usize) -> Result<()> {
    let w = 120 + 90 * cs.len() as u32;
    let root = SVGBackend::new(path, (w.max(480), 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let title = format!("Stream throughput (median of {reps}, whiskers min–max)");
    bar_chart(&root, cs, "throughput_mbps", &title, "Mbit/s")?;
    root.present().map_err(err)?;
    Ok(())
}

/// `cycles.svg`: cycles per byte on the receiving CPU, driver domain and guest stacked (native
/// configurations: the total only).
pub fn cycles(path: &Path, cs: &[ConfigSummary], reps: usize) -> Result<()> {
    let w = 120 + 90 * cs.len() as u32;
    let root = SVGBackend::new(path, (w.max(480), 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let total = |c: &ConfigSummary| c.stats["cycles_per_byte.total"];
    // Headroom for the legend.
    let ymax = 1.25 * top(cs.iter().filter_map(|c| total(c).map(|s| s.max)));
    let names: Vec<String> = cs.iter().map(|c| c.name.clone()).collect();
    let title = format!("CPU cycles per byte on CPU 0 (median of {reps})");
    let mut ch = bar_axes(&root, &title, "cycles per byte", &names, ymax)?;
    let (mut legend_driver, mut legend_native) = (false, false);
    for (i, c) in cs.iter().enumerate() {
        let i = i as u32;
        let Some(t) = total(c) else { continue };
        let d = c.median("cycles_per_byte.driver");
        let g = c.median("cycles_per_byte.guest");
        match (d, g) {
            (Some(d), Some(g)) => {
                let a = ch.draw_series([bar(i, 0.0, d, DRIVER)]).map_err(err)?;
                if !legend_driver {
                    a.label("driver domain").legend(|(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], DRIVER.filled())
                    });
                }
                let a = ch.draw_series([bar(i, d, d + g, GUEST)]).map_err(err)?;
                if !legend_driver {
                    a.label("guest").legend(|(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], GUEST.filled())
                    });
                }
                legend_driver = true;
            }
            _ => {
                let a = ch
                    .draw_series([bar(i, 0.0, t.median, NATIVE)])
                    .map_err(err)?;
                if !legend_native {
                    a.label("native (no split)").legend(|(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], NATIVE.filled())
                    });
                }
                legend_native = true;
            }
        }
        whisker(&mut ch, i, t.min, t.max)?;
        ch.draw_series([EmptyElement::at((SegmentValue::CenterOf(i), t.max))
            + Text::new(format!("{:.2}", t.median), (0, -4), label_style(12))])
            .map_err(err)?;
    }
    legend!(ch, SeriesLabelPosition::UpperRight, 13);
    root.present().map_err(err)?;
    Ok(())
}

/// One panel of the sweep: a metric against the timeout (log scale), with min–max whiskers,
/// and the reference configurations as horizontal lines.
fn sweep_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    points: &[(f64, &ConfigSummary)],
    refs: &[&ConfigSummary],
    key: &str,
    title: &str,
    unit: &str,
) -> Result<()> {
    let xs: Vec<f64> = points.iter().map(|(x, _)| *x).collect();
    let (x0, x1) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min) / 1.5,
        xs.iter().copied().fold(0.0, f64::max) * 1.5,
    );
    let ymax = top(points
        .iter()
        .map(|(_, c)| *c)
        .chain(refs.iter().copied())
        .filter_map(|c| c.stats[key].map(|s| s.max)));
    let mut ch = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0.max(0.5)..x1).log_scale(), 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| axis_number(*v))
        .x_desc("flush timeout (µs, log scale)")
        .y_desc(unit)
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    let med: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|(x, c)| c.median(key).map(|y| (*x, y)))
        .collect();
    ch.draw_series(LineSeries::new(med.clone(), PV.stroke_width(2)))
        .map_err(err)?
        .label("timeout:USEC")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], PV.stroke_width(2)));
    ch.draw_series(
        med.iter()
            .map(|&(x, y)| Circle::new((x, y), 4, PV.filled())),
    )
    .map_err(err)?;
    for (x, c) in points {
        if let Some(s) = c.stats[key].filter(|s| s.max > s.min) {
            ch.draw_series([PathElement::new(vec![(*x, s.min), (*x, s.max)], BLACK)])
                .map_err(err)?;
        }
    }
    let palette = [GUEST, NATIVE, RGBColor(0x4a, 0x9a, 0x4a), RED];
    for (k, r) in refs.iter().enumerate() {
        let Some(y) = r.median(key) else { continue };
        let color = palette[k % palette.len()];
        ch.draw_series(DashedLineSeries::new(
            vec![(x0.max(0.5), y), (x1, y)],
            6,
            4,
            color.stroke_width(2),
        ))
        .map_err(err)?
        .label(r.name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    legend!(ch, SeriesLabelPosition::LowerRight, 13);
    Ok(())
}

/// `sweep.svg`: throughput (top) and TCP_RR rate (bottom) against the flush timeout.
pub fn sweep(path: &Path, points: &[(f64, &ConfigSummary)], refs: &[&ConfigSummary]) -> Result<()> {
    let root = SVGBackend::new(path, (760, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    sweep_panel(
        &panels[0],
        points,
        refs,
        "throughput_mbps",
        "Stream throughput against the flush timeout",
        "Mbit/s",
    )?;
    sweep_panel(
        &panels[1],
        points,
        refs,
        "rr_tps",
        "TCP_RR rate against the flush timeout",
        "transactions/s",
    )?;
    root.present().map_err(err)?;
    Ok(())
}

/// The lines of `guests.svg`: for each configuration run at several guest counts (`NAME/gN`),
/// its base name and its (guests, summary) points in ascending order. Configurations run at
/// one count only are left out (nothing to draw a line through).
pub fn guest_lines(cs: &[ConfigSummary]) -> Vec<(String, Vec<(f64, &ConfigSummary)>)> {
    let mut lines: Vec<(String, Vec<(f64, &ConfigSummary)>)> = Vec::new();
    for c in cs {
        let Ok(n) = configs::Name::parse(&c.name) else {
            continue;
        };
        let base = configs::Name { guests: 1, ..n }.with_base(n.base);
        match lines.iter_mut().find(|(b, _)| *b == base) {
            Some((_, pts)) => pts.push((n.guests as f64, c)),
            None => lines.push((base, vec![(n.guests as f64, c)])),
        }
    }
    lines.retain(|(_, pts)| pts.len() > 1);
    for (_, pts) in &mut lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// One panel of `guests.svg`: `key`'s median against the number of guests, a line per
/// configuration, min–max whiskers.
fn guests_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    lines: &[(String, Vec<(f64, &ConfigSummary)>)],
    key: &str,
    title: &str,
    unit: &str,
    ymax: Option<f64>,
) -> Result<()> {
    let x1 = (lines.iter())
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(1.0, f64::max);
    let ymax = ymax.unwrap_or_else(|| {
        top(lines
            .iter()
            .flat_map(|(_, p)| p.iter().filter_map(|(_, c)| c.stats[key].map(|s| s.max))))
    });
    let mut ch = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.5..x1 + 0.5, 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| axis_number(*v))
        .x_desc("guests streaming at once")
        .y_desc(unit)
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    let palette = [PV, GUEST, RGBColor(0x4a, 0x9a, 0x4a), RED, NATIVE];
    for (k, (name, pts)) in lines.iter().enumerate() {
        let color = palette[k % palette.len()];
        let med: Vec<(f64, f64)> = (pts.iter())
            // One guest has the whole aggregate: its fairness index is 1 by definition.
            .filter_map(|(x, c)| {
                let one = (key == "jain" && *x == 1.0).then_some(1.0);
                c.median(key).or(one).map(|y| (*x, y))
            })
            .collect();
        ch.draw_series(LineSeries::new(med.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        ch.draw_series(
            med.iter()
                .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
        )
        .map_err(err)?;
        for (x, c) in pts {
            if let Some(s) = c.stats[key].filter(|s| s.max > s.min) {
                ch.draw_series([PathElement::new(vec![(*x, s.min), (*x, s.max)], BLACK)])
                    .map_err(err)?;
            }
        }
    }
    legend!(ch, SeriesLabelPosition::LowerLeft, 13);
    Ok(())
}

/// `guests.svg` (`--sweep guests`): aggregate throughput (top) and Jain's fairness index
/// (bottom) against the number of guests, one line per configuration.
pub fn guests(path: &Path, lines: &[(String, Vec<(f64, &ConfigSummary)>)]) -> Result<()> {
    let root = SVGBackend::new(path, (760, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    guests_panel(
        &panels[0],
        lines,
        "throughput_mbps",
        "Aggregate throughput against the number of guests",
        "Mbit/s",
        None,
    )?;
    guests_panel(
        &panels[1],
        lines,
        "jain",
        "Jain's fairness index against the number of guests (1 at one guest)",
        "index",
        Some(1.05),
    )?;
    root.present().map_err(err)?;
    Ok(())
}

/// `soak.svg`: the daemon's RSS (top) and open descriptors (bottom) against time.
pub fn soak(path: &Path, samples: &[super::soak::SoakSample]) -> Result<()> {
    let root = SVGBackend::new(path, (760, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    let x1 = samples.iter().map(|s| s.t_s / 60.0).fold(1.0, f64::max);
    type Get = fn(&super::soak::SoakSample) -> f64;
    let series: [(&str, &str, Get); 2] = [
        ("Driver domain daemon: resident memory", "MiB", |s| {
            s.rss_kib as f64 / 1024.0
        }),
        (
            "Driver domain daemon: open descriptors",
            "descriptors",
            |s| s.fds as f64,
        ),
    ];
    for (area, (title, unit, get)) in panels.iter().zip(series) {
        let ymax = top(samples.iter().map(get));
        let mut ch = ChartBuilder::on(area)
            .caption(title, (FONT, 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x1, 0.0..ymax)
            .map_err(err)?;
        ch.configure_mesh()
            .light_line_style(TRANSPARENT)
            .y_label_formatter(&|v| axis_number(*v))
            .x_desc("minutes")
            .y_desc(unit)
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let pts: Vec<(f64, f64)> = samples.iter().map(|s| (s.t_s / 60.0, get(s))).collect();
        ch.draw_series(LineSeries::new(pts.clone(), PV.stroke_width(2)))
            .map_err(err)?;
        ch.draw_series(pts.iter().map(|&p| Circle::new(p, 3, PV.filled())))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
/// One panel of [`size_sweep`]: a line per configuration, (bytes, value) points.
pub struct Panel<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    /// A logarithmic value axis (for figures spanning decades).
    pub log_y: bool,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Draws one [`Panel`] against the record size (log scale) on `area`.
fn size_panel(area: &DrawingArea<SVGBackend, Shift>, p: &Panel) -> Result<()> {
    let xs = p.series.iter().flat_map(|(_, v)| v.iter().map(|(x, _)| *x));
    let x0 = xs.clone().fold(f64::INFINITY, f64::min);
    let x1 = xs.fold(0.0, f64::max);
    let (x0, x1) = if x0.is_finite() && x1 > 0.0 {
        (x0 / 1.6, x1 * 1.6)
    } else {
        (1.0, 10.0)
    };
    let ys = p.series.iter().flat_map(|(_, v)| v.iter().map(|(_, y)| *y));
    let ymax = top(ys.clone());
    let ymin = ys.filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
    let palette = [
        NATIVE,
        PV,
        GUEST,
        RGBColor(0x4a, 0x9a, 0x4a),
        RED,
        RGBColor(0x8e, 0x44, 0xad),
    ];
    let caption = |ch: &mut ChartBuilder<SVGBackend>| {
        ch.caption(p.title, (FONT, 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
    };
    // The log axis puts its ticks at powers of ten: decimal units name them exactly.
    let size_label = |v: &f64| {
        let v = *v;
        if v >= 1e6 {
            format!("{:.0} MB", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.0} kB", v / 1e3)
        } else {
            format!("{v:.0} B")
        }
    };
    macro_rules! draw {
        ($ch:expr) => {{
            let mut ch = $ch;
            ch.configure_mesh()
                .light_line_style(TRANSPARENT)
                .x_label_formatter(&size_label)
                .y_label_formatter(&|v| axis_number(*v))
                .x_desc("record size (log scale)")
                .y_desc(p.unit)
                .label_style((FONT, 13))
                .draw()
                .map_err(err)?;
            for (k, (name, pts)) in p.series.iter().enumerate() {
                let color = palette[k % palette.len()];
                ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                ch.draw_series(
                    pts.iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(err)?;
            }
            legend!(ch, SeriesLabelPosition::UpperLeft, 13);
        }};
    }
    let mut b = ChartBuilder::on(area);
    caption(&mut b);
    if p.log_y && ymin.is_finite() {
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale(), ((ymin / 2.0)..ymax * 2.0).log_scale())
            .map_err(err)?);
    } else {
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale(), 0.0..ymax)
            .map_err(err)?);
    }
    Ok(())
}

/// `records.svg` of `--sweep record-size`: the panels one above the other.
pub fn size_sweep(path: &Path, panels: &[Panel]) -> Result<()> {
    let root = SVGBackend::new(path, (760, 380 * panels.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    for (area, p) in root
        .split_evenly((panels.len().max(1), 1))
        .iter()
        .zip(panels)
    {
        size_panel(area, p)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// `pktsize.svg`: cycles per packet against the packet size (log scale), one line per grant
/// mechanism; rows driver domain, guest and total, one column per placement. Saturated
/// points are drawn hollow.
pub fn pktsize(path: &Path, r: &pktsize::Report) -> Result<()> {
    let cols = r.placements.len().max(1);
    let root = SVGBackend::new(path, (520 * cols as u32, 1020)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((3, cols));
    let palette = [
        DRIVER,
        GUEST,
        RGBColor(0x4a, 0x9a, 0x4a),
        RED,
        RGBColor(0x8a, 0x4a, 0xa8),
        NATIVE,
    ];
    let x0 = r.sizes.first().copied().unwrap_or(64) as f64 / 1.3;
    let x1 = r.sizes.last().copied().unwrap_or(65536) as f64 * 1.3;
    type Get = fn(&pktsize::Point) -> f64;
    let rows: [(&str, Get); 3] = [
        ("driver domain", |p| p.dd_cycles),
        ("guest", |p| p.guest_cycles),
        ("total", |p| p.total_cycles),
    ];
    for (ri, (what, get)) in rows.iter().enumerate() {
        for (ci, pl) in r.placements.iter().enumerate() {
            let area = &panels[ri * cols + ci];
            let pts: Vec<&pktsize::Point> = r
                .points
                .iter()
                .filter(|p| p.placement == *pl && p.received > 0)
                .collect();
            let ymax = top(pts.iter().map(|p| get(p)));
            let mut ch = ChartBuilder::on(area)
                .caption(format!("{what}, placement {}", pl.name()), (FONT, 16))
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(64)
                .build_cartesian_2d((x0..x1).log_scale(), 0.0..ymax)
                .map_err(err)?;
            ch.configure_mesh()
                .light_line_style(TRANSPARENT)
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| axis_number(*v))
                .x_desc("UDP payload (bytes, log scale)")
                .y_desc("cycles per packet")
                .label_style((FONT, 12))
                .draw()
                .map_err(err)?;
            for (k, m) in r.mechanisms.iter().enumerate() {
                let color = palette[k % palette.len()];
                let line: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|p| &p.mechanism == m)
                    .map(|p| (p.size as f64, get(p)))
                    .collect();
                ch.draw_series(LineSeries::new(line, color.stroke_width(2)))
                    .map_err(err)?
                    .label(m.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                ch.draw_series(pts.iter().filter(|p| &p.mechanism == m).map(|p| {
                    let style = if p.saturated {
                        color.stroke_width(1)
                    } else {
                        color.filled()
                    };
                    Circle::new((p.size as f64, get(p)), 3, style)
                }))
                .map_err(err)?;
            }
            legend!(ch, SeriesLabelPosition::UpperLeft, 12);
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::measure::Sample;
    use super::super::summary::summarize;
    use super::*;

    #[test]
    fn guest_lines_group_configurations_by_base_in_guest_order() {
        let configs: Vec<String> = [
            "xen/g4",
            "xen",
            "adaptive/g2",
            "xen/g2",
            "da@tx/g2",
            "da@tx",
        ]
        .map(String::from)
        .to_vec();
        let samples: Vec<Sample> = (configs.iter().enumerate())
            .map(|(i, c)| Sample {
                config: c.clone(),
                rep: 1,
                throughput_mbps: 100.0 * (i + 1) as f64,
                jain: c.contains("/g").then_some(0.9),
                ..Sample::default()
            })
            .collect();
        let cs = summarize(&configs, &samples);
        let lines = guest_lines(&cs);
        let got: Vec<(&str, Vec<f64>)> = (lines.iter())
            .map(|(b, p)| (b.as_str(), p.iter().map(|(x, _)| *x).collect()))
            .collect();
        // adaptive ran at one count only: no line.
        assert_eq!(
            got,
            [("xen", vec![1.0, 2.0, 4.0]), ("da@tx", vec![1.0, 2.0])]
        );
        assert_eq!(lines[0].1[2].1.name, "xen/g4");
        let dir = std::env::temp_dir().join(format!("pvnet-guests-svg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("guests.svg");
        guests(&p, &lines).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.contains("Jain") && svg.contains("da@tx"), "{svg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
