//! The figures' data: which lines each panel holds, from the aggregate. Kept apart from the
//! HTML so tests can check the numbers a figure draws.

use crate::aggregate::{Aggregate, CellStats};
use crate::plan::{ExpandedPlan, HostConfig, Scenario};
use crate::record::{RunRecord, RunSeries};
use crate::summary::shown_modes;
use crate::svg::{Chart, Marker, Point, Scale, Series};
use tcptune_core::Bytes;

/// The colour of a mode's line (stable across panels).
pub fn color(mode: &str) -> &'static str {
    match mode {
        "none" => "#7f7f7f",
        "kernel" => "#1f77b4",
        "manual" => "#ff7f0e",
        "psc" => "#9467bd",
        "drs" => "#2ca02c",
        "probe" => "#8c564b",
        "auto" => "#d62728",
        "ideal" => "#111111",
        m if m.starts_with("fixed") => "#17becf",
        _ => "#bcbd22",
    }
}

/// Colours for the stream counts of the buffer sweep (the i-th count listed in the plan).
pub fn stream_color(i: usize) -> &'static str {
    ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"][i % 5]
}

/// `64K`, `1M`, `32M` for axis ticks.
pub fn short_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        Bytes(b).to_string()
    }
}

/// `0.5 ms`, `25 ms`.
pub fn rtt_label(rtt_us: u64) -> String {
    let v = rtt_us as f64 / 1000.0;
    if v.fract() == 0.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v} ms")
    }
}

fn point(x: f64, what: &str, s: &CellStats) -> Point {
    let mib = |b: f64| b / f64::from(1u32 << 20);
    Point {
        x,
        y: s.mbps(),
        lo: s.throughput_bps.min / 1e6,
        hi: s.throughput_bps.max / 1e6,
        hollow: s.capped > 0,
        tip: format!(
            "{what}: median {:.1} Mbit/s (min {:.1}, max {:.1}; {} run(s){}), peak buffer {:.2} MiB kernel-held, {} stream(s) used",
            s.mbps(),
            s.throughput_bps.min / 1e6,
            s.throughput_bps.max / 1e6,
            s.runs,
            if s.capped > 0 {
                format!(", {} time-capped", s.capped)
            } else {
                String::new()
            },
            mib(s.peak_buffer_bytes.median),
            s.streams_used.median
        ),
    }
}

/// One panel of the paper's layout: throughput against parallel streams, one line per mode,
/// for one host configuration and path.
pub fn streams_panel(plan: &ExpandedPlan, agg: &Aggregate, host: HostConfig, rtt_us: u64) -> Chart {
    let mut series = Vec::new();
    for m in shown_modes(plan, host) {
        let pts: Vec<Point> = agg
            .series(rtt_us, host, &m)
            .into_iter()
            .map(|(n, s)| {
                let what = if m == "ideal" {
                    format!("ideal ({}) P={n}", s.key.tune)
                } else {
                    format!("{m} P={n}")
                };
                point(f64::from(n), &what, s)
            })
            .collect();
        series.push(Series {
            name: m.clone(),
            color: color(&m).into(),
            dashed: m == "ideal",
            points: pts,
        });
    }
    Chart {
        title: format!("{}, {}", host.title(), rtt_label(rtt_us)),
        width: 320.0,
        height: 230.0,
        x_label: "parallel streams".into(),
        x_scale: Scale::Linear,
        x_ticks: plan
            .plan
            .streams
            .iter()
            .map(|&n| (f64::from(n), n.to_string()))
            .collect(),
        y_label: "Mbit/s".into(),
        y_max: None,
        series,
        vlines: Vec::new(),
        hlines: reference_lines(plan, rtt_us),
    }
}

/// The link rate and the physical limit (the best throughput from the command's start any
/// TCP sender could reach on this path with the plan's transfer size), Mbit/s.
pub fn reference_lines(plan: &ExpandedPlan, rtt_us: u64) -> Vec<Marker> {
    let p = &plan.plan;
    vec![
        Marker {
            at: p.rate.0 as f64 / 1e6,
            label: "link".into(),
            keep_in_view: false,
        },
        Marker {
            at: crate::limit::limit_bps(p.rate, p.mtu, rtt_us, p.transfer_bytes()) / 1e6,
            label: "limit".into(),
            keep_in_view: true,
        },
    ]
}

/// The paper's Figure 5 for one path: throughput against the fixed per-stream buffer, one line
/// per stream count.
pub fn sweep_panel(plan: &ExpandedPlan, agg: &Aggregate, rtt_us: u64, streams: &[u32]) -> Chart {
    let mut series = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for (i, &n) in streams.iter().enumerate() {
        let pts: Vec<Point> = agg
            .sweep(rtt_us, n)
            .into_iter()
            .map(|(b, s)| {
                sizes.push(b.0);
                point(b.0 as f64, &format!("fixed:{} P={n}", Bytes(b.0)), s)
            })
            .collect();
        series.push(Series {
            name: format!("{n} stream{}", if n == 1 { "" } else { "s" }),
            color: stream_color(i).into(),
            dashed: false,
            points: pts,
        });
    }
    sizes.sort_unstable();
    sizes.dedup();
    // Label every other power of two when there are many.
    let step = if sizes.len() > 8 { 2 } else { 1 };
    let x_ticks = sizes
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0)
        .map(|(_, &b)| (b as f64, short_size(b)))
        .collect();
    let bdp = plan.plan.bdp(rtt_us).0;
    Chart {
        title: format!("Buffer sweep, {} (user/kernel tuning)", rtt_label(rtt_us)),
        width: 480.0,
        height: 260.0,
        x_label: "fixed buffer per stream (setsockopt value, log scale)".into(),
        x_scale: Scale::Log2,
        x_ticks,
        y_label: "Mbit/s".into(),
        y_max: None,
        series,
        vlines: vec![Marker {
            at: bdp as f64,
            label: format!("BDP {}", short_size_approx(bdp)),
            keep_in_view: false,
        }],
        hlines: reference_lines(plan, rtt_us),
    }
}

fn short_size_approx(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
    } else {
        format!("{:.0} KiB", b as f64 / 1024.0)
    }
}

/// Most points a time-series line keeps (evenly spread; each point is a marker).
const SERIES_POINTS: usize = 80;

/// TCP payload per segment assumed when the window is drawn in bytes: the MTU less 52 bytes
/// of IPv4 and TCP headers with timestamps.
fn mss_of(mtu: u32) -> f64 {
    f64::from(mtu.saturating_sub(52).max(1))
}

/// Every `n`-th of `v` so that at most [`SERIES_POINTS`] remain (the last one kept).
fn thin<T: Clone>(v: &[T]) -> Vec<T> {
    let step = v.len().div_ceil(SERIES_POINTS).max(1);
    let mut out: Vec<T> = v.iter().step_by(step).cloned().collect();
    if let Some(last) = v.last() {
        if !(v.len() - 1).is_multiple_of(step) {
            out.push(last.clone());
        }
    }
    out
}

fn line(name: &str, color: &str, pts: Vec<(f64, f64)>, unit: &str) -> Series {
    Series {
        name: name.into(),
        color: color.into(),
        dashed: false,
        points: thin(&pts)
            .into_iter()
            .map(|(x, y)| Point {
                x,
                y,
                lo: y,
                hi: y,
                hollow: false,
                tip: format!("{name} at {x:.2} s: {y:.2} {unit}"),
            })
            .collect(),
    }
}

/// Ticks every second (every few seconds on long runs) from 0 to `end_s`.
fn time_ticks(end_s: f64) -> Vec<(f64, String)> {
    let step = (end_s / 8.0).ceil().max(1.0);
    let mut v = Vec::new();
    let mut t = 0.0;
    while t <= end_s + 1e-9 {
        v.push((t, format!("{t:.0}")));
        t += step;
    }
    v
}

/// PSC's Figure 1 on a path that changes: for one path-change run, the first stream's
/// window and buffers (MiB) and its delivery rate (Mbit/s) over time, with the change
/// marked. The window is `snd_cwnd` segments of the MTU less 52 header bytes.
pub fn path_change_charts(plan: &ExpandedPlan, rec: &RunRecord, s: &RunSeries) -> [Chart; 2] {
    let mib = |b: f64| b / f64::from(1u32 << 20);
    let mss = mss_of(plan.plan.mtu);
    let snd = &s.sender;
    let window: Vec<(f64, f64)> = snd
        .iter()
        .map(|x| (x.t_s, mib(f64::from(x.snd_cwnd_segs) * mss)))
        .collect();
    let sndbuf: Vec<(f64, f64)> = snd
        .iter()
        .filter_map(|x| Some((x.t_s, mib(f64::from(x.sndbuf_bytes?)))))
        .collect();
    let rcvbuf: Vec<(f64, f64)> = s
        .receiver
        .iter()
        .filter_map(|x| Some((x.t_s, mib(f64::from(x.rcvbuf_bytes?)))))
        .collect();
    let rate: Vec<(f64, f64)> = snd
        .iter()
        .filter_map(|x| Some((x.t_s, x.delivery_rate_bytes_per_sec? as f64 * 8.0 / 1e6)))
        .collect();
    let end = snd
        .iter()
        .chain(&s.receiver)
        .map(|x| x.t_s)
        .fold(0.0, f64::max);
    let vlines: Vec<Marker> = s
        .change_at_s
        .map(|at| Marker {
            at,
            label: s.change.clone(),
            keep_in_view: false,
        })
        .into_iter()
        .collect();
    let title = format!(
        "{} P={} ({}), {}",
        rec.cell.tune,
        rec.cell.streams,
        rec.cell.host,
        rtt_label(rec.cell.rtt_us)
    );
    let chart = |title: String, y_label: &str, series: Vec<Series>| Chart {
        title,
        width: 480.0,
        height: 260.0,
        x_label: "seconds since the data started (first stream)".into(),
        x_scale: Scale::Linear,
        x_ticks: time_ticks(end),
        y_label: y_label.into(),
        y_max: None,
        series,
        vlines: vlines.clone(),
        hlines: Vec::new(),
    };
    [
        chart(
            format!("{title}: window and buffers"),
            "MiB",
            vec![
                line("cwnd", "#d62728", window, "MiB"),
                line("sndbuf (sender)", "#1f77b4", sndbuf, "MiB"),
                line("rcvbuf (receiver)", "#2ca02c", rcvbuf, "MiB"),
            ],
        ),
        chart(
            format!("{title}: delivery rate"),
            "Mbit/s",
            vec![line("delivery rate", "#9467bd", rate, "Mbit/s")],
        ),
    ]
}

/// The path-change runs the report draws: the first successful repetition of each
/// path-change cell that recorded a series, in plan order.
pub fn path_change_runs<'a>(
    plan: &ExpandedPlan,
    records: &'a [RunRecord],
) -> Vec<(&'a RunRecord, &'a RunSeries)> {
    plan.cells
        .iter()
        .filter(|c| c.key.scenario == Some(Scenario::PathChange))
        .filter_map(|c| {
            records
                .iter()
                .filter(|r| r.cell == c.key && r.ok)
                .find_map(|r| r.series.as_ref().map(|s| (r, s)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::aggregate::tests::run;
    use crate::plan::Plan;

    #[test]
    fn streams_panel_has_a_line_per_mode_with_points_per_stream_count() {
        let plan = Plan::quick().expand();
        let u = HostConfig::Untuned;
        let mut capped = run(25_000, u, 1, "none", 1, 20.0, 1);
        capped.capped = true;
        let agg = aggregate(&[
            capped,
            run(25_000, u, 4, "none", 1, 80.0, 1),
            run(25_000, u, 1, "auto", 1, 700.0, 1),
            run(25_000, u, 1, "auto", 2, 900.0, 1),
            run(25_000, u, 1, "auto", 3, 800.0, 1),
        ]);
        let c = streams_panel(&plan, &agg, u, 25_000);
        let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["none", "kernel", "drs", "auto"]);
        let none = &c.series[0].points;
        assert_eq!(
            none.iter().map(|p| (p.x, p.y)).collect::<Vec<_>>(),
            vec![(1.0, 20.0), (4.0, 80.0)]
        );
        assert!(none[0].hollow && !none[1].hollow);
        let auto = &c.series[3].points[0];
        assert_eq!((auto.y, auto.lo, auto.hi), (800.0, 700.0, 900.0));
        assert!(c.series[1].points.is_empty(), "kernel was not run");
        assert_eq!(c.x_ticks.len(), 2);
        assert_eq!(c.title, "No tuning, 25 ms");
        // The link and the physical limit: 128 MiB in 2.5 RTT + 1.112 s.
        assert_eq!(c.hlines[0].at, 1000.0);
        assert!(
            (c.hlines[1].at - 1073.74 / (0.0625 + 1.1123)).abs() < 0.5,
            "{}",
            c.hlines[1].at
        );
    }

    #[test]
    fn sweep_panel_orders_sizes_and_marks_the_bdp() {
        let plan = Plan::full().expand();
        let uk = HostConfig::UserKernel;
        let agg = aggregate(&[
            run(500, uk, 1, "fixed:1048576", 1, 900.0, 1),
            run(500, uk, 1, "fixed:8192", 1, 100.0, 1),
            run(500, uk, 2, "fixed:8192", 1, 190.0, 1),
            run(500, uk, 1, "fixed:65536", 1, 600.0, 1),
        ]);
        let c = sweep_panel(&plan, &agg, 500, &[1, 2]);
        let xs: Vec<f64> = c.series[0].points.iter().map(|p| p.x).collect();
        assert_eq!(xs, vec![8192.0, 65536.0, 1048576.0]);
        assert_eq!(c.series[1].points.len(), 1);
        assert_eq!(c.vlines[0].at, 62_500.0);
        assert_eq!(c.x_ticks[0].1, "8K");
        assert_eq!(c.x_ticks[2].1, "1M");
    }

    #[test]
    fn thin_keeps_at_most_the_limit_and_the_last_point() {
        let v: Vec<u32> = (0..1000).collect();
        let t = thin(&v);
        assert!(t.len() <= SERIES_POINTS + 1, "{}", t.len());
        assert_eq!(t.first(), Some(&0));
        assert_eq!(t.last(), Some(&999));
        assert_eq!(thin(&[1, 2, 3]), vec![1, 2, 3]);
        assert!(thin::<u32>(&[]).is_empty());
    }

    #[test]
    fn path_change_charts_draw_window_buffers_and_rate_with_the_change_marked() {
        let plan = Plan::quick().expand();
        let key = crate::plan::CellKey {
            scenario: Some(Scenario::PathChange),
            ..crate::plan::CellKey::new(25_000, HostConfig::Untuned, 1, "auto")
        };
        let mut rec = RunRecord::failed(key, 1, 0.0, 0.0, String::new());
        let sample = |t: f64, cwnd: u32| tcptune_core::SampleRecord {
            t_s: t,
            snd_cwnd_segs: cwnd,
            sndbuf_bytes: Some(cwnd * 3000),
            rcvbuf_bytes: Some(cwnd * 4000),
            delivery_rate_bytes_per_sec: Some(u64::from(cwnd) * 100_000),
            rtt_us: 25_000,
            bytes_acked: None,
            bytes_received: None,
            wmem_queued_bytes: None,
            rmem_alloc_bytes: None,
            rcv_rtt_us: 0,
            rcv_space_bytes: 0,
            notsent_bytes: None,
            rwnd_limited_us: None,
            sndbuf_limited_us: None,
            pool_fair_share_bytes: None,
            pool_held_bytes: None,
        };
        let s = RunSeries {
            change_at_s: Some(1.0),
            change: "rtt 25ms -> 100ms".into(),
            sender: (0..20)
                .map(|i| sample(f64::from(i) * 0.1, 10 + i))
                .collect(),
            receiver: (0..20)
                .map(|i| sample(f64::from(i) * 0.1, 10 + i))
                .collect(),
            ..RunSeries::default()
        };
        rec.ok = true;
        rec.series = Some(s.clone());
        let [buffers, rate] = path_change_charts(&plan, &rec, &s);
        let names: Vec<&str> = buffers.series.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["cwnd", "sndbuf (sender)", "rcvbuf (receiver)"]);
        assert!(buffers.series.iter().all(|x| x.points.len() == 20));
        assert_eq!(buffers.vlines[0].at, 1.0);
        assert_eq!(rate.series[0].points.len(), 20);
        assert!(buffers.render().contains("rtt 25ms -&gt; 100ms"));
        let records = [rec];
        let mut with_cell = plan.clone();
        with_cell.cells.push(crate::plan::Cell {
            key: records[0].cell.clone(),
            ..with_cell.cells[0].clone()
        });
        assert_eq!(path_change_runs(&with_cell, &records).len(), 1);
        assert!(path_change_runs(&plan, &records).is_empty());
    }
}
