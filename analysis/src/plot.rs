//! A sweep as an SVG plot (plotters, SVG backend): decode tokens/s per GPU against the first
//! swept axis, one line per value of the second, estimate solid and bound (a ceiling) thin;
//! points past the published context limit are drawn as crosses, points whose decode batch does
//! not fit the KV budget as open circles, both named in the legend.

use plotters::prelude::*;

use crate::sweep::{Key, SweepRow, SweepSpec};

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One point of a series.
#[derive(Clone, Copy)]
struct Point {
    x: f64,
    estimate: f64,
    bound: f64,
    /// Past the published context limit.
    extrapolated: bool,
    /// The decode batch's caches fit the KV budget.
    fits: bool,
}

/// Renders the sweep; `title` heads the chart.
pub fn svg(spec: &SweepSpec, rows: &[SweepRow], title: &str) -> Result<String, String> {
    let (xkey, xs) = spec.axes.first().ok_or("empty sweep")?;
    let series_key = spec.axes.get(1).map(|(k, _)| *k);
    let series_vals: Vec<Option<i128>> = match spec.axes.get(1) {
        Some((_, vs)) => vs.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    let mut series: Vec<Vec<Point>> = vec![Vec::new(); series_vals.len()];
    let mut limit = None;
    for r in rows {
        let Ok(rep) = &r.report else { continue };
        limit = limit.or(rep.context_limit);
        let (Some(e), Some(b)) = (
            rep.tokens_per_s_per_gpu_estimate,
            rep.tokens_per_s_per_gpu_bound,
        ) else {
            continue;
        };
        let x = r
            .point
            .iter()
            .find(|(k, _)| k == xkey)
            .map(|(_, v)| *v as f64)
            .unwrap_or(0.0);
        let sv = series_key.and_then(|k| r.point.iter().find(|(q, _)| *q == k).map(|(_, v)| *v));
        let i = series_vals.iter().position(|v| *v == sv).unwrap_or(0);
        let fits = rep
            .memory
            .as_ref()
            .is_some_and(|m| rep.assumptions.decode_batch <= m.max_decode_requests);
        series[i].push(Point {
            x,
            estimate: e,
            bound: b,
            extrapolated: rep.extrapolated,
            fits,
        });
    }
    let xmin = *xs.iter().min().ok_or("no points")? as f64;
    let xmax = *xs.iter().max().ok_or("no points")? as f64;
    let ymax = series
        .iter()
        .flatten()
        .map(|p| p.bound.max(p.estimate))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let log_x = xmin > 0.0 && xmax / xmin >= 8.0;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let caption = format!("{title}: decode tokens/s per GPU");
        let mut b = ChartBuilder::on(&root);
        b.caption(caption, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70);
        let xr = if xmax > xmin {
            xmin..xmax
        } else {
            xmin * 0.5..xmax * 1.5
        };
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .light_line_style(WHITE)
                    .x_labels(8)
                    .y_labels(8)
                    .x_label_formatter(&|v| format!("{:.0}", v))
                    .y_label_formatter(&|v| format!("{:.0}", v))
                    .x_desc(xkey.name())
                    .y_desc("tokens/s per GPU")
                    .draw()
                    .map_err(|e| e.to_string())?;
                if *xkey == Key::Context
                    && let Some(l) = limit
                {
                    let l = l as f64;
                    if l >= xmin && l <= xmax {
                        chart
                            .draw_series(LineSeries::new(vec![(l, 0.0), (l, ymax)], BLACK.mix(0.4)))
                            .map_err(|e| e.to_string())?
                            .label(format!("published context limit ({})", l as i128))
                            .legend(|(x, y)| {
                                PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.4))
                            });
                    }
                }
                for (i, pts) in series.iter().enumerate() {
                    let color = PALETTE[i % PALETTE.len()];
                    let name = match (series_key, series_vals[i]) {
                        (Some(k), Some(v)) => format!("{}={v}", k.name()),
                        _ => "decode".to_string(),
                    };
                    chart
                        .draw_series(LineSeries::new(
                            pts.iter().map(|p| (p.x, p.estimate)),
                            color.stroke_width(2),
                        ))
                        .map_err(|e| e.to_string())?
                        .label(format!("{name} (estimate)"))
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                        });
                    chart
                        .draw_series(LineSeries::new(
                            pts.iter().map(|p| (p.x, p.bound)),
                            color.mix(0.5),
                        ))
                        .map_err(|e| e.to_string())?
                        .label(format!("{name} (bound)"))
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 16, y)], color.mix(0.5))
                        });
                    chart
                        .draw_series(pts.iter().filter(|p| !p.extrapolated).map(|p| {
                            let style = if p.fits {
                                color.filled()
                            } else {
                                color.stroke_width(1)
                            };
                            Circle::new((p.x, p.estimate), 4, style)
                        }))
                        .map_err(|e| e.to_string())?;
                }
                let extra: Vec<(f64, f64)> = series
                    .iter()
                    .flatten()
                    .filter(|p| p.extrapolated)
                    .map(|p| (p.x, p.estimate))
                    .collect();
                if !extra.is_empty() {
                    chart
                        .draw_series(extra.iter().map(|&p| Cross::new(p, 6, RED.stroke_width(2))))
                        .map_err(|e| e.to_string())?
                        .label("extrapolation: past the published context limit")
                        .legend(|(x, y)| Cross::new((x + 8, y), 5, RED.stroke_width(2)));
                }
                if series.iter().flatten().any(|p| !p.fits && !p.extrapolated) {
                    chart
                        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                        .map_err(|e| e.to_string())?
                        .label("open circle: the batch's caches exceed the KV budget")
                        .legend(|(x, y)| Circle::new((x + 8, y), 4, BLACK.stroke_width(1)));
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperRight)
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        if log_x {
            draw!(
                b.build_cartesian_2d(xr.log_scale(), 0.0..ymax)
                    .map_err(|e| e.to_string())?
            );
        } else {
            draw!(
                b.build_cartesian_2d(xr, 0.0..ymax)
                    .map_err(|e| e.to_string())?
            );
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}
