//! PSC's figures redrawn from the aggregate: Figure 3 (aggregate throughput to the remote
//! receiver), Figure 4 (peak network memory), Figure 7 (aggregate throughput over each
//! path), Figure 8 (peak memory over two paths), and the send-buffer share each connection
//! held over time in one run (what the memory budget gave it).

use super::aggregate::{data_sockets, memory_series, path_of_peer, PscAggregate, PscCellStats};
use super::plan::{Experiment, PscPlan, LOCAL, REMOTE};
use super::record::PscRecord;
use crate::aggregate::Spread;
use crate::figures::stream_color;
use crate::svg::{Chart, Marker, Point, Scale, Series};

/// Colour of a PSC mode.
pub fn color(mode: &str) -> &'static str {
    match mode {
        "default" => "#7f7f7f",
        "hiperf" => "#ff7f0e",
        "psc" => "#9467bd",
        "auto" => "#d62728",
        _ => "#bcbd22",
    }
}

fn point(x: f64, s: Spread, scale: f64, tip: String) -> Point {
    Point {
        x,
        y: s.median / scale,
        lo: s.min / scale,
        hi: s.max / scale,
        hollow: false,
        tip,
    }
}

fn chart(title: &str, x_label: &str, counts: &[u32], y_label: &str, series: Vec<Series>) -> Chart {
    Chart {
        title: title.into(),
        width: 420.0,
        height: 260.0,
        x_label: x_label.into(),
        x_scale: Scale::Linear,
        x_ticks: counts
            .iter()
            .map(|&n| (f64::from(n), n.to_string()))
            .collect(),
        y_label: y_label.into(),
        y_max: None,
        series,
        vlines: Vec::new(),
        hlines: Vec::new(),
    }
}

/// What [`lines`] draws: an experiment's cells, the x value and the unit.
struct Lines<'a> {
    e: Experiment,
    /// x is every connection (else connections per receiver).
    x_total: bool,
    /// Divide values by this.
    scale: f64,
    unit: &'a str,
    /// After the mode's name (` remote`).
    suffix: &'a str,
    dashed: bool,
}

impl Lines<'static> {
    /// Throughput in Mbit/s against the connections to each receiver, solid.
    fn mbit(e: Experiment) -> Lines<'static> {
        Lines {
            e,
            x_total: false,
            scale: 1e6,
            unit: "Mbit/s",
            suffix: "",
            dashed: false,
        }
    }

    /// Memory in KiB, otherwise as [`Lines::mbit`].
    fn kib(e: Experiment) -> Lines<'static> {
        Lines {
            scale: 1024.0,
            unit: "KiB",
            ..Lines::mbit(e)
        }
    }
}

/// One line per mode of `value`.
fn lines(
    plan: &PscPlan,
    agg: &PscAggregate,
    l: &Lines,
    value: &dyn Fn(&PscCellStats) -> Option<Spread>,
) -> Vec<Series> {
    let Lines {
        e,
        x_total,
        scale,
        unit,
        suffix,
        dashed,
    } = *l;
    plan.modes
        .iter()
        .map(|m| Series {
            name: format!("{m}{suffix}"),
            color: color(m).into(),
            dashed,
            points: agg
                .series(e, m)
                .into_iter()
                .filter_map(|(n, c)| {
                    let x = if x_total { c.cell.total() } else { n };
                    let s = value(c)?;
                    let tip = format!(
                        "{m}{suffix}, {}: median {:.1} {unit} (min {:.1}, max {:.1}; {} of {} run(s) ok)",
                        c.cell.id(),
                        s.median / scale,
                        s.min / scale,
                        s.max / scale,
                        c.ok_runs,
                        c.runs
                    );
                    Some(point(f64::from(x), s, scale, tip))
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

fn mem_lines(plan: &PscPlan) -> Vec<Marker> {
    vec![
        Marker {
            at: plan.network_memory as f64 / 1024.0,
            label: "network memory (PSC's NMBCLUSTERS)".into(),
            keep_in_view: true,
        },
        Marker {
            at: plan.budget as f64 / 1024.0,
            label: "memory budget (AUTO_SND_THRESH)".into(),
            keep_in_view: true,
        },
    ]
}

/// Figure 3: aggregate throughput to the remote receiver.
pub fn figure3(plan: &PscPlan, agg: &PscAggregate) -> Chart {
    let series = lines(plan, agg, &Lines::mbit(Experiment::Basic), &|c| {
        c.remote_bps
    });
    let mut c = chart(
        "Figure 3: aggregate throughput, remote path",
        "concurrent connections",
        &plan.basic,
        "Mbit/s",
        series,
    );
    c.hlines = vec![Marker {
        at: plan.remote.rate_bps as f64 / 1e6,
        label: "link".into(),
        keep_in_view: true,
    }];
    c
}

/// Figure 4: peak send-buffer memory, remote path only.
pub fn figure4(plan: &PscPlan, agg: &PscAggregate) -> Chart {
    let series = lines(plan, agg, &Lines::kib(Experiment::Basic), &|c| {
        c.peak_in_use
    });
    let mut c = chart(
        "Figure 4: peak send-queue memory",
        "concurrent connections",
        &plan.basic,
        "KiB",
        series,
    );
    c.hlines = mem_lines(plan);
    c
}

/// Figure 7: aggregate throughput over each path (solid remote, dashed local).
pub fn figure7(plan: &PscPlan, agg: &PscAggregate) -> Chart {
    let mut series = lines(
        plan,
        agg,
        &Lines {
            suffix: " remote",
            ..Lines::mbit(Experiment::Diverse)
        },
        &|c| c.remote_bps,
    );
    series.extend(lines(
        plan,
        agg,
        &Lines {
            suffix: " local",
            dashed: true,
            ..Lines::mbit(Experiment::Diverse)
        },
        &|c| c.local_bps,
    ));
    let mut c = chart(
        "Figure 7: aggregate throughput over each path",
        "connections to each receiver",
        &plan.diverse,
        "Mbit/s",
        series,
    );
    c.hlines = [REMOTE, LOCAL]
        .iter()
        .map(|&p| Marker {
            at: plan.path(p).rate_bps as f64 / 1e6,
            label: if p == REMOTE {
                "remote link"
            } else {
                "local link"
            }
            .into(),
            keep_in_view: true,
        })
        .collect();
    c
}

/// Figure 8: peak send-buffer memory over two paths, against all connections.
pub fn figure8(plan: &PscPlan, agg: &PscAggregate) -> Chart {
    let series = lines(
        plan,
        agg,
        &Lines {
            x_total: true,
            ..Lines::kib(Experiment::Diverse)
        },
        &|c| c.peak_in_use,
    );
    let totals: Vec<u32> = plan.diverse.iter().map(|n| 2 * n).collect();
    let mut c = chart(
        "Figure 8: peak send-queue memory, two paths",
        "connections to both receivers",
        &totals,
        "KiB",
        series,
    );
    c.hlines = mem_lines(plan);
    c
}

/// The run whose shares are drawn: a budgeted mode's largest diverse run (else basic).
pub fn share_run<'a>(plan: &PscPlan, records: &'a [PscRecord]) -> Option<&'a PscRecord> {
    let mode = plan
        .modes
        .iter()
        .find(|m| m.as_str() == "psc")
        .or_else(|| plan.modes.iter().find(|m| super::plan::budgeted(m)))?;
    records
        .iter()
        .filter(|r| &r.cell.mode == mode && r.ok && !r.memory.is_empty())
        .max_by_key(|r| {
            (
                r.cell.experiment,
                r.cell.total(),
                std::cmp::Reverse(r.repetition),
            )
        })
}

/// The send buffer each connection of `r` held over time (`SO_SNDBUF` units), and the sum.
pub fn shares(plan: &PscPlan, r: &PscRecord) -> Chart {
    let data = data_sockets(r);
    let mut series: Vec<Series> = data
        .iter()
        .enumerate()
        .map(|(i, peer)| {
            let path = path_of_peer(peer);
            Series {
                name: format!("{} {peer}", if path == LOCAL { "local" } else { "remote" }),
                color: if path == LOCAL {
                    "#2ca02c"
                } else {
                    stream_color(i)
                }
                .into(),
                dashed: path == LOCAL,
                points: r
                    .memory
                    .iter()
                    .filter_map(|m| {
                        let s = m.sockets.iter().find(|s| s.peer == *peer)?;
                        let kib = (s.sndbuf / 2) as f64 / 1024.0;
                        Some(Point {
                            x: m.t_s,
                            y: kib,
                            lo: kib,
                            hi: kib,
                            hollow: false,
                            tip: format!(
                                "{} connection {peer}: {kib:.0} KiB at {:.1} s",
                                if path == LOCAL { "local" } else { "remote" },
                                m.t_s
                            ),
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    series.push(Series {
        name: "held, all".into(),
        color: "#111111".into(),
        dashed: false,
        points: memory_series(r)
            .into_iter()
            .map(|(t, _, held)| {
                let kib = held as f64 / 1024.0;
                Point {
                    x: t,
                    y: kib,
                    lo: kib,
                    hi: kib,
                    hollow: false,
                    tip: format!("all connections: {kib:.0} KiB held at {t:.1} s"),
                }
            })
            .collect(),
    });
    let end = r.memory.last().map_or(1.0, |m| m.t_s.ceil().max(1.0));
    let step = (end / 8.0).ceil().max(1.0);
    let mut c = chart(
        &format!(
            "Send buffer held per connection over time, {} (solid remote, dashed local)",
            r.cell.id()
        ),
        "seconds",
        &[],
        "KiB",
        series,
    );
    c.width = 860.0;
    c.x_ticks = (0..=(end / step) as u32)
        .map(|i| (f64::from(i) * step, format!("{}", f64::from(i) * step)))
        .collect();
    c.hlines = vec![Marker {
        at: plan.budget as f64 / 1024.0,
        label: "memory budget".into(),
        keep_in_view: true,
    }];
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psc::aggregate::aggregate;
    use crate::psc::aggregate::tests::{cell, run};

    #[test]
    fn figures_have_one_line_per_mode_with_data_and_the_memory_lines() {
        let plan = PscPlan::quick();
        let recs = vec![
            run(
                cell(Experiment::Basic, "psc", 4),
                &[9e6; 4],
                100_000,
                80_000,
            ),
            run(
                cell(Experiment::Basic, "hiperf", 4),
                &[9e6; 4],
                409_600,
                409_600,
            ),
            run(
                cell(Experiment::Diverse, "psc", 2),
                &[15e6, 15e6, 4e6, 4e6],
                100_000,
                1,
            ),
        ];
        let agg = aggregate(&plan, &recs);
        let f3 = figure3(&plan, &agg);
        assert_eq!(f3.series.len(), 2);
        assert_eq!(f3.series[0].points[0].y, 36.0);
        let f4 = figure4(&plan, &agg);
        assert_eq!(f4.hlines.len(), 2);
        assert_eq!(
            f4.series
                .iter()
                .find(|s| s.name == "hiperf")
                .unwrap()
                .points[0]
                .y,
            1600.0
        );
        let f7 = figure7(&plan, &agg);
        assert_eq!(f7.series.len(), 2, "psc remote and psc local");
        assert_eq!(figure8(&plan, &agg).series[0].points[0].x, 4.0);
        let r = share_run(&plan, &recs).unwrap();
        assert_eq!(r.cell.experiment, Experiment::Diverse);
        let s = shares(&plan, r);
        assert_eq!(s.series.len(), 5, "4 connections and the sum");
        assert!(s.render().contains("<svg"));
    }
}
