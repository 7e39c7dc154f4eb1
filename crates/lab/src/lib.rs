//! The lab: reproduce Weigle & Feng's comparison of TCP buffer-tuning techniques on emulated
//! long fat pipes, and draw it.
//!
//! The pure part turns a [`Plan`](plan::Plan) into cells ([`plan`]), runs into records
//! ([`record`]), records into medians and `ideal` picks ([`aggregate`]), and those into the
//! headline ([`headline`]), the paper-vs-today claims ([`claims`]), `summary.json` and the
//! terminal table ([`summary`]) and `report.html` ([`html`], [`figures`], [`svg`]).
//! [`feasible`] says which cells the rootless mode cannot reproduce (they are marked
//! "not run"). [`results`] reads and writes the results directory. The runner ([`runner`]) is the I/O:
//! emulated paths, `tcptune serve`/`send` child processes, sysctls, calibration, progress.
//! [`psc`] is PSC's experiments (one memory-limited sender, two paths): plan, records,
//! aggregation, claims, figures and report; its runner is `runner::psc`.

pub mod aggregate;
pub mod claims;
pub mod feasible;
pub mod figures;
pub mod headline;
pub mod html;
pub mod limit;
pub mod plan;
pub mod psc;
pub mod record;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod summary;
pub mod svg;

pub use plan::{Cell, CellKey, ExpandedPlan, HostConfig, Plan, PlanMode};
pub use record::{LabMeta, RunRecord};
pub use results::{build, rebuild, Built};
