//! "Paper vs today": each claim of the seed papers, what they measured (quoted), what this
//! lab measured (computed from the results) and a verdict computed from the numbers.
//!
//! Rules every claim follows:
//!
//! * **Per case, against the paper's own figure.** A claim is judged case by case (each path,
//!   stream count and mode the paper's statement covers), each against the number the paper
//!   gives, with the tolerance stated in the claim's `rule`. Nothing is folded into a median
//!   first: a median over stream counts hid the case the paper meant.
//! * **Verdicts**: `holds` when every case holds, `refuted` when none does, `partly` when
//!   some do, and then `measured` names which cases hold and which do not; `not measured`
//!   when the cells are not in the results; `for reference` for a number with no yes/no.
//! * **No check that cannot fail**: `tests.rs` feeds each claim data that refutes it.
//! * **The `none` caveat**: `none` is `setsockopt(64 KiB)` on both ends (the kernel holds
//!   128 KiB and the window reaches about 64 KiB). Linux 2.2.20's untuned window was about
//!   27 KB (the paper's law gives C = 214 Mbit/s x ms per process), so `none` moves about
//!   2.4 x as much per round trip as the paper's 2.2.20-none. Every claim whose verdict rests
//!   on `none` carries [`NONE_CAVEAT`].
//!
//! Mapping of the paper's kernels to today's modes: 2.2.20-none (no autotuning, small fixed
//! buffers) -> `none`; 2.4.17-Auto (Linux autotuning) -> `kernel`; 2.4.17-DRS -> `drs`. The
//! paper's "delay" is the round-trip time here. Every throughput is the lab's primary figure,
//! from the command's start to the last byte at the receiver (the paper timed from the
//! first process's start to the last one's end).

mod extras;
#[cfg(test)]
mod tests;
mod wf;

use crate::aggregate::Aggregate;
use crate::plan::ExpandedPlan;
use serde::{Deserialize, Serialize};

/// What the numbers say about a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every case agrees with the claim.
    Holds,
    /// Some cases agree, others do not (the measured text says which).
    Partly,
    /// No case agrees with the claim.
    #[serde(alias = "does_not_hold")]
    Refuted,
    /// The cells needed are not in the results.
    NotMeasured,
    /// A number to compare, with no yes/no.
    Reference,
}

impl Verdict {
    /// Words for the report.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Partly => "partly",
            Verdict::Refuted => "refuted",
            Verdict::NotMeasured => "not measured",
            Verdict::Reference => "for reference",
        }
    }
}

/// One case of a claim: a path, stream count or mode the claim covers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Which case (`25 ms, P=4, kernel`).
    pub case: String,
    /// What the paper's figure says for it.
    pub paper: String,
    /// What this lab measured.
    pub measured: String,
    /// Whether it holds within the rule's tolerance.
    pub holds: bool,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Short id.
    pub id: String,
    /// Which paper (`Weigle & Feng 2002`, `Semke et al. 1998`, `Tierney`).
    pub source: String,
    /// The claim, in a sentence.
    pub claim: String,
    /// What the paper measured (quoted or summarized, with the figure).
    pub paper: String,
    /// What we measured: for `partly`, which cases hold and which do not first.
    #[serde(alias = "today")]
    pub measured: String,
    /// The verdict.
    pub verdict: Verdict,
    /// How each case is judged, with the tolerance.
    pub rule: String,
    /// Every case with its verdict.
    #[serde(default)]
    pub cases: Vec<Case>,
    /// What the verdict depends on beyond the numbers (the `none` = 64 KiB choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
}

/// The caveat of every verdict that rests on `none`.
pub const NONE_CAVEAT: &str = "none here is setsockopt(64 KiB) on both ends (the kernel holds \
128 KiB, the window reaches about 64 KiB); Linux 2.2.20's untuned window was about 27 KB (the \
paper's C = 214), so none moves about 2.4 x as much per round trip as 2.2.20-none did: with a \
27 KB buffer this verdict could differ";

/// Where a claim comes from.
pub(crate) const WF: &str = "Weigle & Feng 2002";
pub(crate) const PSC: &str = "Semke, Mahdavi & Mathis 1998";
pub(crate) const TIERNEY: &str = "Tierney";

/// The text of a claim before its cases are judged.
pub(crate) struct Spec {
    pub(crate) id: &'static str,
    pub(crate) source: &'static str,
    pub(crate) claim: &'static str,
    pub(crate) paper: &'static str,
    pub(crate) rule: String,
}

impl Spec {
    /// The claim with no data: say what it needs.
    pub(crate) fn missing(self, need: &str) -> Claim {
        Claim {
            id: self.id.into(),
            source: self.source.into(),
            claim: self.claim.into(),
            paper: self.paper.into(),
            measured: format!("needs {need}; not in these results"),
            verdict: Verdict::NotMeasured,
            rule: self.rule,
            cases: Vec::new(),
            caveat: None,
        }
    }

    /// The claim judged from its cases (see the module documentation), with `note` after
    /// the cases' summary.
    pub(crate) fn judged(self, cases: Vec<Case>, note: Option<String>, caveat: bool) -> Claim {
        if cases.is_empty() {
            return self.missing("cases this claim covers");
        }
        let (hold, fail): (Vec<&Case>, Vec<&Case>) = cases.iter().partition(|c| c.holds);
        let verdict = if fail.is_empty() {
            Verdict::Holds
        } else if hold.is_empty() {
            Verdict::Refuted
        } else {
            Verdict::Partly
        };
        let list = |v: &[&Case]| {
            v.iter()
                .map(|c| format!("{} ({})", c.case, c.measured))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut measured = match verdict {
            Verdict::Partly => format!(
                "holds for {} of {} cases: {}. Refuted for: {}",
                hold.len(),
                cases.len(),
                list(&hold),
                list(&fail)
            ),
            _ => list(&cases.iter().collect::<Vec<_>>()),
        };
        if let Some(n) = note {
            measured.push_str(". ");
            measured.push_str(&n);
        }
        Claim {
            id: self.id.into(),
            source: self.source.into(),
            claim: self.claim.into(),
            paper: self.paper.into(),
            measured,
            verdict,
            rule: self.rule,
            cases,
            caveat: caveat.then(|| NONE_CAVEAT.to_string()),
        }
    }

    /// A number for reference, with no verdict.
    pub(crate) fn reference(self, measured: String) -> Claim {
        Claim {
            id: self.id.into(),
            source: self.source.into(),
            claim: self.claim.into(),
            paper: self.paper.into(),
            measured,
            verdict: Verdict::Reference,
            rule: self.rule,
            cases: Vec::new(),
            caveat: None,
        }
    }
}

/// A case.
pub(crate) fn case(case: String, paper: impl Into<String>, measured: String, holds: bool) -> Case {
    Case {
        case,
        paper: paper.into(),
        measured,
        holds,
    }
}

/// `25 ms`, `0.5 ms`.
pub(crate) fn ms(rtt_us: u64) -> String {
    let v = rtt_us as f64 / 1000.0;
    if v.fract() == 0.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v} ms")
    }
}

/// The RTT at or below which a path is the paper's "0.5 ms" case.
pub(crate) const LOW_RTT_US: u64 = 2_000;
/// The RTT from which a path is a WAN case (the paper's 25 ms and beyond).
pub(crate) const WAN_RTT_US: u64 = 20_000;

/// What every claim reads.
pub(crate) struct Ctx<'a> {
    pub(crate) agg: &'a Aggregate,
    pub(crate) link_bps: f64,
    pub(crate) plan: &'a ExpandedPlan,
}

/// Every claim of the Weigle & Feng comparison and of the experiments beyond it, in the
/// paper's order (PSC's experiments have their own table, [`crate::psc`]).
pub fn claims(plan: &ExpandedPlan, agg: &Aggregate) -> Vec<Claim> {
    let c = Ctx {
        agg,
        link_bps: plan.plan.rate.0 as f64,
        plan,
    };
    let mut v = wf::claims(&c);
    v.extend(extras::claims(&c));
    v
}
