//! The TOML of `--plan FILE` (see the module documentation of [`super`] for the keys).

use super::geometric_sizes;
use super::{
    BufferSweep, CompetingSpec, CongestionSweep, Extras, HostConfig, IdealSweep, ModeAt,
    PathChangeSpec, Plan, PlanError, PlanMode, SizeSweep,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use tcptune_core::{parse_duration, Bytes};

/// The raw TOML of a plan file; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    name: Option<String>,
    rate: Option<String>,
    mtu: Option<u32>,
    queue_bdp: Option<f64>,
    rtts: Option<Vec<String>>,
    streams: Option<Vec<u32>>,
    repetitions: Option<u32>,
    messages: Option<u64>,
    message_size: Option<String>,
    max_time: Option<String>,
    seed: Option<u64>,
    congestion: Option<String>,
    raised_max: Option<String>,
    hosts: Option<BTreeMap<String, Vec<String>>>,
    ideal: Option<IdealSweep>,
    buffer_sweep: Option<BufferSweepFile>,
    known_path: Option<bool>,
    careful_resume_server: Option<bool>,
    congestion_sweep: Option<CongestionFile>,
    size_sweep: Option<SizeFile>,
    competing: Option<CompetingFile>,
    path_change: Option<Vec<PathChangeFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BufferSweepFile {
    rtts: Vec<String>,
    streams: Vec<u32>,
    min: Option<String>,
    max: Option<String>,
    step: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CongestionFile {
    controls: Vec<String>,
    rtts: Vec<String>,
    streams: Vec<u32>,
    modes: Vec<String>,
}

impl CongestionFile {
    fn into_sweep(self) -> Result<CongestionSweep, PlanError> {
        Ok(CongestionSweep {
            controls: self
                .controls
                .iter()
                .map(|c| c.trim().to_ascii_lowercase())
                .collect(),
            rtts_us: rtts(&self.rtts)?,
            streams: self.streams,
            modes: mode_list(&self.modes)?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeFile {
    sizes: Vec<String>,
    rtts: Vec<String>,
    streams: Vec<u32>,
    modes: Vec<String>,
}

impl SizeFile {
    fn into_sweep(self) -> Result<SizeSweep, PlanError> {
        let sizes = self
            .sizes
            .iter()
            .map(|s| {
                s.parse::<Bytes>()
                    .map_err(|e| PlanError::Invalid(format!("size_sweep size '{s}': {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(SizeSweep {
            sizes,
            rtts_us: rtts(&self.rtts)?,
            streams: self.streams,
            modes: mode_list(&self.modes)?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompetingFile {
    rtts: Vec<String>,
    streams: Vec<u32>,
    modes: Vec<String>,
    first: String,
    second_at: String,
    second: String,
}

impl CompetingFile {
    fn into_spec(self) -> Result<CompetingSpec, PlanError> {
        Ok(CompetingSpec {
            rtts_us: rtts(&self.rtts)?,
            streams: self.streams,
            modes: mode_list(&self.modes)?,
            first_ms: millis("competing.first", &self.first)?,
            second_at_ms: millis("competing.second_at", &self.second_at)?,
            second_ms: millis("competing.second", &self.second)?,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathChangeFile {
    rtt: String,
    to_rtt: Option<String>,
    to_rate: Option<String>,
    at: String,
    duration: String,
    streams: Option<u32>,
    modes: Vec<String>,
}

impl PathChangeFile {
    fn into_spec(self) -> Result<PathChangeSpec, PlanError> {
        Ok(PathChangeSpec {
            rtt_us: parse_rtt(&self.rtt)?,
            to_rtt_us: self.to_rtt.as_deref().map(parse_rtt).transpose()?,
            to_rate: self
                .to_rate
                .as_deref()
                .map(|r| {
                    r.parse()
                        .map_err(|e| PlanError::Invalid(format!("path_change.to_rate '{r}': {e}")))
                })
                .transpose()?,
            at_ms: millis("path_change.at", &self.at)?,
            duration_ms: millis("path_change.duration", &self.duration)?,
            streams: self.streams.unwrap_or(1),
            modes: mode_list(&self.modes)?,
        })
    }
}

fn rtts(list: &[String]) -> Result<Vec<u64>, PlanError> {
    list.iter().map(|s| parse_rtt(s)).collect()
}

fn mode_list(list: &[String]) -> Result<Vec<ModeAt>, PlanError> {
    list.iter().map(|s| s.parse()).collect()
}

fn millis(what: &str, s: &str) -> Result<u64, PlanError> {
    let d = parse_duration(s).map_err(|e| PlanError::Invalid(format!("{what} '{s}': {e}")))?;
    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Plan {
    /// Parse a plan file; missing keys take [`Plan::full`]'s values, except the extra
    /// experiments, which a file has only when it lists them.
    pub fn from_toml(text: &str) -> Result<Plan, PlanError> {
        let f: PlanFile = toml::from_str(text)?;
        let (rtts_given, streams_given) = (f.rtts.is_some(), f.streams.is_some());
        let mut p = Plan::full();
        p.name = f.name.unwrap_or_else(|| "plan".into());
        let inv = |what: &str, e: &dyn fmt::Display| PlanError::Invalid(format!("{what}: {e}"));
        if let Some(r) = f.rate {
            p.rate = r.parse().map_err(|e| inv("rate", &e))?;
        }
        if let Some(m) = f.mtu {
            p.mtu = m;
        }
        if let Some(q) = f.queue_bdp {
            p.queue_bdp = q;
        }
        if let Some(rtts) = f.rtts {
            p.rtts_us = rtts
                .iter()
                .map(|s| parse_rtt(s))
                .collect::<Result<_, _>>()?;
        }
        if let Some(s) = f.streams {
            p.streams = s;
        }
        if let Some(r) = f.repetitions {
            p.repetitions = r;
        }
        if let Some(m) = f.messages {
            p.messages = m;
        }
        if let Some(s) = f.message_size {
            p.message_size = s.parse().map_err(|e| inv("message_size", &e))?;
        }
        if let Some(t) = f.max_time {
            let d = parse_duration(&t).map_err(|e| inv("max_time", &e))?;
            p.max_time_ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        }
        if let Some(s) = f.seed {
            p.seed = s;
        }
        if let Some(c) = f.congestion {
            p.congestion = (!c.eq_ignore_ascii_case("default")).then_some(c);
        }
        if let Some(m) = f.raised_max {
            p.raised_max = if m.eq_ignore_ascii_case("auto") {
                None
            } else {
                Some(m.parse().map_err(|e| inv("raised_max", &e))?)
            };
        }
        if let Some(h) = f.hosts {
            let mut hosts = BTreeMap::new();
            for (k, list) in h {
                let host: HostConfig = k.parse()?;
                let ms = list
                    .iter()
                    .map(|s| s.parse())
                    .collect::<Result<Vec<PlanMode>, _>>()?;
                hosts.insert(host, ms);
            }
            p.hosts = hosts;
        }
        if let Some(i) = f.ideal {
            p.ideal = i;
        }
        if let Some(b) = f.buffer_sweep {
            let min = b.min.as_deref().unwrap_or("8k");
            let max = b.max.as_deref().unwrap_or("64m");
            let min: Bytes = min.parse().map_err(|e| inv("buffer_sweep.min", &e))?;
            let max: Bytes = max.parse().map_err(|e| inv("buffer_sweep.max", &e))?;
            p.buffer_sweep = Some(BufferSweep {
                rtts_us: b
                    .rtts
                    .iter()
                    .map(|s| parse_rtt(s))
                    .collect::<Result<_, _>>()?,
                streams: b.streams,
                sizes: geometric_sizes(min, max, b.step.unwrap_or(2)),
            });
        } else if rtts_given || streams_given {
            // A user's own matrix without a Figure 5 section gets none, rather than the
            // full preset's (which may name paths the user did not ask for).
            p.buffer_sweep = None;
        }
        p.careful_resume_server = f.careful_resume_server.unwrap_or(false);
        p.extras = Extras {
            known_path: f.known_path.unwrap_or(false),
            congestion: f.congestion_sweep.map(|c| c.into_sweep()).transpose()?,
            sizes: f.size_sweep.map(|c| c.into_sweep()).transpose()?,
            competing: f.competing.map(|c| c.into_spec()).transpose()?,
            path_change: f
                .path_change
                .unwrap_or_default()
                .into_iter()
                .map(PathChangeFile::into_spec)
                .collect::<Result<_, _>>()?,
        };
        p.validate()?;
        Ok(p)
    }
}

pub(super) fn parse_rtt(s: &str) -> Result<u64, PlanError> {
    let d = parse_duration(s).map_err(|e| PlanError::Invalid(format!("rtt '{s}': {e}")))?;
    Ok(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
