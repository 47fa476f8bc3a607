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
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)?;
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
    ch.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)?;
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
            ch.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .label_font((FONT, 12))
                .draw()
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}
