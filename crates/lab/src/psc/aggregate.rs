//! From PSC runs to cells: per run the aggregate throughput of each path, Jain's fairness
//! index across connections and across the two paths, and the sender's peak send-buffer
//! memory; per cell their median and range over repetitions.
//!
//! Memory is counted in `SO_SNDBUF` units (the kernel's `tb` and `w` halved, as tcptune's
//! budget counts), over the data sockets only: a socket is a data socket when it
//! acknowledged at least [`DATA_SOCKET_MIN_ACKED`] during the run (control connections
//! move a few kilobytes).

use super::plan::{PscCell, PscPlan, LOCAL, REMOTE};
use super::record::{PscRecord, DATA_SOCKET_MIN_ACKED};
use crate::aggregate::Spread;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// Jain's fairness index of `x` (1 = equal; 1/n = one takes all). `None` when empty or
/// all zero.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

/// One run, summarized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Aggregate throughput of the remote and the local path, bit/s.
    pub path_bps: [f64; 2],
    /// Both paths, bit/s.
    pub total_bps: f64,
    /// Jain's index over the connections, each divided by its path's fair share (the path's
    /// rate over its connections): 1 when every connection gets its path's fair share
    /// alike.
    pub jain_connections: Option<f64>,
    /// Jain's index over the two paths' utilizations (aggregate over rate); `None` with one
    /// path in use.
    pub jain_paths: Option<f64>,
    /// Peak of the send queues' memory over the run, `SO_SNDBUF` units.
    pub peak_in_use: u64,
    /// Peak of the send buffers held (`SO_SNDBUF`) over the run.
    pub peak_held: u64,
    /// Every connection succeeded and the peak use stayed within the network memory.
    pub sustained: bool,
}

/// The data sockets of a run: the peers that acknowledged enough at some sample.
pub fn data_sockets(r: &PscRecord) -> BTreeSet<SocketAddr> {
    r.memory
        .iter()
        .flat_map(|m| &m.sockets)
        .filter(|s| s.acked >= DATA_SOCKET_MIN_ACKED)
        .map(|s| s.peer)
        .collect()
}

/// The path of a peer address (198.19.0.1 remote, .2 local; see `tcptune_emu::path_addr`).
pub fn path_of_peer(peer: &SocketAddr) -> usize {
    match super::record::canonical(*peer) {
        SocketAddr::V4(a) if a.ip().octets()[3] == 2 => LOCAL,
        _ => REMOTE,
    }
}

/// Per sample: seconds, memory in use and held, `SO_SNDBUF` units.
pub fn memory_series(r: &PscRecord) -> Vec<(f64, u64, u64)> {
    let data = data_sockets(r);
    r.memory
        .iter()
        .map(|m| {
            let (q, h) = m
                .sockets
                .iter()
                .filter(|s| data.contains(&s.peer))
                .fold((0, 0), |(q, h), s| (q + s.queued / 2, h + s.sndbuf / 2));
            (m.t_s, q, h)
        })
        .collect()
}

/// One run's statistics (`None` for a run that failed before its connections started).
pub fn run_stats(plan: &PscPlan, r: &PscRecord) -> Option<RunStats> {
    if r.connections.is_empty() {
        return None;
    }
    let mut path_bps = [0.0; 2];
    for c in &r.connections {
        path_bps[c.path.min(1)] += c.throughput_bps;
    }
    let n = r.cell.connections;
    let share = |p: usize| plan.path(p).rate_bps as f64 / f64::from(n[p].max(1));
    let norm: Vec<f64> = r
        .connections
        .iter()
        .map(|c| c.throughput_bps / share(c.path.min(1)))
        .collect();
    let used: Vec<f64> = [REMOTE, LOCAL]
        .into_iter()
        .filter(|&p| n[p] > 0)
        .map(|p| path_bps[p] / plan.path(p).rate_bps as f64)
        .collect();
    let series = memory_series(r);
    let peak_in_use = series.iter().map(|s| s.1).max().unwrap_or(0);
    let peak_held = series.iter().map(|s| s.2).max().unwrap_or(0);
    let all_ok = r.connections.len() as u32 == r.cell.total() && r.connections.iter().all(|c| c.ok);
    Some(RunStats {
        path_bps,
        total_bps: path_bps[0] + path_bps[1],
        jain_connections: jain(&norm),
        jain_paths: if used.len() == 2 { jain(&used) } else { None },
        peak_in_use,
        peak_held,
        sustained: all_ok && !series.is_empty() && peak_in_use <= plan.network_memory,
    })
}

/// One cell over its repetitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PscCellStats {
    /// The cell.
    pub cell: PscCell,
    /// Runs recorded.
    pub runs: usize,
    /// Runs in which every connection succeeded.
    pub ok_runs: usize,
    /// Remote path's aggregate throughput, bit/s.
    pub remote_bps: Option<Spread>,
    /// Local path's aggregate throughput, bit/s.
    pub local_bps: Option<Spread>,
    /// Both paths, bit/s.
    pub total_bps: Option<Spread>,
    /// Per-connection throughput (every connection of every run), bit/s.
    pub per_connection_bps: Option<Spread>,
    /// See [`RunStats::jain_connections`].
    pub jain_connections: Option<Spread>,
    /// See [`RunStats::jain_paths`].
    pub jain_paths: Option<Spread>,
    /// Peak send-queue memory, bytes.
    pub peak_in_use: Option<Spread>,
    /// Peak send buffers held, bytes.
    pub peak_held: Option<Spread>,
    /// Every run sustained the cell's connections (see [`RunStats::sustained`]).
    pub sustained: bool,
    /// Packets the emulator dropped on the remote and the local path (median over runs).
    #[serde(default)]
    pub drops: [Option<Spread>; 2],
}

impl PscCellStats {
    /// A path's aggregate (median).
    pub fn path_bps(&self, p: usize) -> Option<f64> {
        if p == LOCAL {
            self.local_bps.map(|s| s.median)
        } else {
            self.remote_bps.map(|s| s.median)
        }
    }
}

/// Every cell that has runs, in the plan's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PscAggregate {
    /// The cells.
    pub cells: Vec<PscCellStats>,
}

impl PscAggregate {
    /// A cell.
    pub fn get(&self, cell: &PscCell) -> Option<&PscCellStats> {
        self.cells.iter().find(|c| &c.cell == cell)
    }

    /// A mode's cells of an experiment, by connections per receiver.
    pub fn series(&self, e: super::plan::Experiment, mode: &str) -> Vec<(u32, &PscCellStats)> {
        let mut v: Vec<(u32, &PscCellStats)> = self
            .cells
            .iter()
            .filter(|c| c.cell.experiment == e && c.cell.mode == mode)
            .map(|c| (c.cell.per_receiver(), c))
            .collect();
        v.sort_by_key(|(n, _)| *n);
        v
    }
}

/// Aggregate every record.
pub fn aggregate(plan: &PscPlan, records: &[PscRecord]) -> PscAggregate {
    let mut by: BTreeMap<&PscCell, Vec<&PscRecord>> = BTreeMap::new();
    for r in records {
        by.entry(&r.cell).or_default().push(r);
    }
    let mut cells: Vec<PscCellStats> = by
        .into_iter()
        .map(|(cell, rs)| {
            let stats: Vec<RunStats> = rs.iter().filter_map(|r| run_stats(plan, r)).collect();
            let good: Vec<(&&PscRecord, RunStats)> = rs
                .iter()
                .filter(|r| r.ok)
                .filter_map(|r| run_stats(plan, r).map(|s| (r, s)))
                .collect();
            let spread = |f: &dyn Fn(&RunStats) -> Option<f64>| {
                Spread::of(good.iter().filter_map(|(_, s)| f(s)))
            };
            PscCellStats {
                cell: cell.clone(),
                runs: rs.len(),
                ok_runs: good.len(),
                remote_bps: spread(&|s| (cell.connections[REMOTE] > 0).then_some(s.path_bps[0])),
                local_bps: spread(&|s| (cell.connections[LOCAL] > 0).then_some(s.path_bps[1])),
                total_bps: spread(&|s| Some(s.total_bps)),
                per_connection_bps: Spread::of(
                    good.iter()
                        .flat_map(|(r, _)| r.connections.iter().map(|c| c.throughput_bps)),
                ),
                jain_connections: spread(&|s| s.jain_connections),
                jain_paths: spread(&|s| s.jain_paths),
                peak_in_use: Spread::of(stats.iter().map(|s| s.peak_in_use as f64)),
                peak_held: Spread::of(stats.iter().map(|s| s.peak_held as f64)),
                drops: [REMOTE, LOCAL].map(|p| {
                    Spread::of(
                        rs.iter()
                            .filter_map(|r| r.paths.get(p).map(|s| s.drops as f64)),
                    )
                }),
                sustained: !stats.is_empty()
                    && stats.len() == rs.len()
                    && stats.iter().all(|s| s.sustained),
            }
        })
        .collect();
    let order = plan.cells();
    cells.sort_by_key(|c| {
        order
            .iter()
            .position(|o| o == &c.cell)
            .unwrap_or(usize::MAX)
    });
    PscAggregate { cells }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::psc::plan::Experiment;
    use crate::psc::record::{ConnResult, MemSample, SockMem, PSC_RECORD_SCHEMA_VERSION};

    /// A run of `cell` whose connections got `bps` each (remote first) and whose data
    /// sockets each held `held` and queued `queued` bytes (`SO_SNDBUF` units).
    pub(crate) fn run(cell: PscCell, bps: &[f64], held: u64, queued: u64) -> PscRecord {
        let connections: Vec<ConnResult> = bps
            .iter()
            .enumerate()
            .map(|(i, &b)| ConnResult {
                index: i as u32,
                path: cell.path_of(i as u32),
                local: None,
                ok: true,
                error: None,
                bytes: (b / 8.0) as u64,
                seconds: 1.0,
                throughput_bps: b,
            })
            .collect();
        let sockets = connections
            .iter()
            .map(|c| SockMem {
                peer: SocketAddr::new(
                    [198, 19, 0, 1 + c.path as u8].into(),
                    40_000 + c.index as u16,
                ),
                sndbuf: 2 * held,
                queued: 2 * queued,
                acked: 10 << 20,
            })
            .chain([SockMem {
                peer: "198.19.0.1:39999".parse().unwrap(),
                sndbuf: 1 << 30,
                queued: 1 << 30,
                acked: 100,
            }])
            .collect();
        PscRecord {
            schema_version: PSC_RECORD_SCHEMA_VERSION,
            cell,
            repetition: 1,
            started_unix_s: 0.0,
            wall_s: 1.0,
            ok: true,
            error: None,
            connections,
            memory: vec![MemSample { t_s: 0.5, sockets }],
            paths: vec![
                crate::psc::record::PathRunStats {
                    packets: 1000,
                    drops: 7,
                    queue_peak_bytes: 1,
                },
                crate::psc::record::PathRunStats::default(),
            ],
        }
    }

    pub(crate) fn cell(e: Experiment, mode: &str, n: u32) -> PscCell {
        PscCell {
            experiment: e,
            mode: mode.into(),
            connections: match e {
                Experiment::Basic => [n, 0],
                Experiment::Diverse => [n, n],
            },
        }
    }

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[3.0, 3.0, 3.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0]), None);
    }

    #[test]
    fn run_counts_paths_fair_shares_and_data_sockets_only() {
        let plan = PscPlan::quick();
        let c = cell(Experiment::Diverse, "psc", 2);
        let r = run(c, &[15e6, 15e6, 4.5e6, 4.5e6], 300_000, 200_000);
        let s = run_stats(&plan, &r).unwrap();
        assert_eq!(s.path_bps, [30e6, 9e6]);
        assert_eq!(
            s.jain_connections,
            Some(jain(&[0.75, 0.75, 0.9, 0.9]).unwrap())
        );
        assert_eq!(s.jain_paths, jain(&[0.75, 0.9]));
        // The control socket (acked 100) is not counted although it claims a gigabyte.
        assert_eq!(s.peak_held, 4 * 300_000);
        assert_eq!(s.peak_in_use, 4 * 200_000);
        assert!(s.sustained);
        assert_eq!(
            path_of_peer(&"[::ffff:198.19.0.2]:1".parse().unwrap()),
            LOCAL
        );
        assert_eq!(path_of_peer(&"198.19.0.1:1".parse().unwrap()), REMOTE);
    }

    #[test]
    fn a_run_over_the_network_memory_is_not_sustained() {
        let plan = PscPlan::quick();
        let c = cell(Experiment::Basic, "hiperf", 12);
        let r = run(c, &[3e6; 12], 400_000, 400_000);
        let s = run_stats(&plan, &r).unwrap();
        assert_eq!(s.peak_in_use, 4_800_000);
        assert!(!s.sustained, "12 x 400 kB is over 4 MiB");
        assert_eq!(s.jain_paths, None);
        let agg = aggregate(&plan, &[r]);
        assert!(!agg.cells[0].sustained);
        assert_eq!(agg.cells[0].total_bps.unwrap().median, 36e6);
        assert_eq!(agg.cells[0].drops[0].unwrap().median, 7.0);
        assert_eq!(agg.cells[0].drops[1].unwrap().median, 0.0);
    }

    #[test]
    fn failed_runs_count_as_runs_but_not_in_throughput() {
        let plan = PscPlan::quick();
        let c = cell(Experiment::Basic, "psc", 1);
        let good = run(c.clone(), &[30e6], 500_000, 400_000);
        let bad = PscRecord::failed(c.clone(), 2, 0.0, 1.0, "boom".into());
        let agg = aggregate(&plan, &[good, bad]);
        let s = agg.get(&c).unwrap();
        assert_eq!((s.runs, s.ok_runs), (2, 1));
        assert_eq!(s.total_bps.unwrap().median, 30e6);
        assert!(!s.sustained, "a failed run does not sustain the cell");
    }
}
