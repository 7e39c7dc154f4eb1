//! The scenario cells on a [`Bed`]: two `send`s competing for the path, and one `send`
//! while a thread changes the path under it. What the runs mean is computed by the pure
//! [`crate::scenario`].

use super::{max_time_arg, Bed};
use crate::plan::{CellKey, CompetingSpec, PathChangeSpec, Plan};
use crate::record::RunRecord;
use crate::runner::interrupted;
use crate::scenario::{self, Timeline};
use anyhow::{bail, Context as _};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tcptune_emu::PathConfig;

/// Interval reports of competing transfers (the overlap's rates are read from them).
const COMPETING_INTERVAL: &str = "0.25";

/// The workload of a scenario's transfer: `length` of sending, a fresh path measurement.
fn duration_args(length: Duration) -> [String; 3] {
    ["-t".into(), max_time_arg(length), "--no-path-db".into()]
}

impl Bed {
    /// A competing-transfers run: the first transfer for `first_ms`, a second one of the
    /// same mode started `second_at_ms` after it, both to the same server; the record is the
    /// first's, with the second and the fairness of the overlap in `competing`.
    pub(super) fn run_competing(
        &mut self,
        key: &CellKey,
        rep: u32,
        plan: &Plan,
        spec: &CompetingSpec,
    ) -> anyhow::Result<RunRecord> {
        let args = |length_ms: u64| {
            let mut a = self.send_args(key, plan);
            a.extend(duration_args(Duration::from_millis(length_ms)));
            a.extend(["-i".into(), COMPETING_INTERVAL.into()]);
            a
        };
        let first_len = Duration::from_millis(spec.first_ms);
        let second_len = Duration::from_millis(spec.second_ms);
        let first = self.start_send(&args(spec.first_ms), "send", first_len)?;
        let second_at = first.started + Duration::from_millis(spec.second_at_ms);
        while Instant::now() < second_at {
            if interrupted() {
                bail!("interrupted");
            }
            std::thread::sleep(Duration::from_millis(5).min(second_at - Instant::now()));
        }
        let second = self.start_send(&args(spec.second_ms), "send-second", second_len)?;
        let second_at_s = second.started.duration_since(first.started).as_secs_f64();
        let (mut rec, first_report) = self.finish_send(first, key, rep)?;
        let (second_rec, second_report) = self
            .finish_send(second, key, rep)
            .context("the second (competing) transfer")?;
        if !second_rec.ok && rec.ok {
            rec.ok = false;
            rec.error = Some(format!(
                "the second (competing) transfer failed: {}",
                second_rec.error.as_deref().unwrap_or("no report")
            ));
        }
        rec.competing = Some(Box::new(scenario::competing(
            &Timeline::of(&first_report),
            &Timeline::of(&second_report),
            second_at_s,
            second_rec,
        )));
        Ok(rec)
    }

    /// A path-change run: one transfer of `duration_ms` with its samples kept, while a thread
    /// changes the path `at_ms` after it started; the path is put back afterwards (the other
    /// cells of this RTT share it). The record carries the first stream's time series.
    pub(super) fn run_path_change(
        &mut self,
        key: &CellKey,
        rep: u32,
        plan: &Plan,
        spec: &PathChangeSpec,
    ) -> anyhow::Result<RunRecord> {
        let mut args = self.send_args(key, plan);
        args.extend(duration_args(Duration::from_millis(spec.duration_ms)));
        args.push("--samples".into());
        let control = self.topo()?.path_control();
        let changed = changed_path(&self.path, spec);
        let sending = self.start_send(&args, "send", Duration::from_millis(spec.duration_ms))?;
        let (started, at) = (
            sending.started,
            sending.started + Duration::from_millis(spec.at_ms),
        );
        let (stop, stopped) = mpsc::channel::<()>();
        let changer_control = control.clone();
        let changer = std::thread::Builder::new()
            .name("lab-path-change".into())
            .spawn(move || -> Option<Result<f64, String>> {
                let wait = at.saturating_duration_since(Instant::now());
                match stopped.recv_timeout(wait) {
                    Err(mpsc::RecvTimeoutError::Timeout) => Some(
                        changer_control
                            .set(0, changed)
                            .map(|()| started.elapsed().as_secs_f64())
                            .map_err(|e| e.to_string()),
                    ),
                    // The transfer ended first (or the runner gave up on it).
                    _ => None,
                }
            })
            .context("starting the path-change thread")?;
        let finished = self.finish_send(sending, key, rep);
        let _ = stop.send(());
        let change = changer.join().unwrap_or(None);
        let restored = control.set(0, self.path.clone());
        let (mut rec, report) = finished?;
        restored.context("putting the path back after the change")?;
        let changed_after_s = match change {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                rec.ok = false;
                rec.error = Some(format!("changing the path: {e}"));
                None
            }
            None => {
                if rec.ok {
                    rec.ok = false;
                    rec.error = Some(format!(
                        "the transfer ended before the path changed at {} ms",
                        spec.at_ms
                    ));
                }
                None
            }
        };
        let text = scenario::change_text(key.rtt_us, plan.rate, spec.to_rtt_us, spec.to_rate);
        rec.series = Some(scenario::series(&report, changed_after_s, text));
        Ok(rec)
    }
}

/// `path` after the change `spec` asks for (a BDP-sized queue follows the new BDP).
fn changed_path(path: &PathConfig, spec: &PathChangeSpec) -> PathConfig {
    PathConfig {
        delay: spec
            .to_rtt_us
            .map_or(path.delay, |rtt| Duration::from_nanos(rtt * 500)),
        rate: spec.to_rate.or(path.rate),
        ..path.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptune_core::Rate;

    #[test]
    fn changed_path_takes_the_new_rtt_and_rate_and_keeps_the_rest() {
        let path = PathConfig {
            delay: Duration::from_millis(34),
            rate: Some(Rate::mbit(40)),
            seed: 3,
            ..PathConfig::default()
        };
        let spec = PathChangeSpec {
            rtt_us: 68_000,
            to_rtt_us: Some(2_000),
            to_rate: None,
            at_ms: 1_000,
            duration_ms: 2_000,
            streams: 1,
            modes: Vec::new(),
        };
        let p = changed_path(&path, &spec);
        assert_eq!(
            (p.delay, p.rate, p.seed),
            (Duration::from_millis(1), path.rate, 3)
        );
        let spec = PathChangeSpec {
            to_rtt_us: None,
            to_rate: Some(Rate::mbit(10)),
            ..spec
        };
        let p = changed_path(&path, &spec);
        assert_eq!((p.delay, p.rate), (path.delay, Some(Rate::mbit(10))));
    }

    #[test]
    fn scenario_transfers_send_for_a_time_without_the_path_database() {
        let a = duration_args(Duration::from_millis(2500));
        assert_eq!(a, ["-t".to_string(), "2.5".into(), "--no-path-db".into()]);
    }
}
