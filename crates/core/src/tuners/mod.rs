//! One file per tuning technique. Each has an `XConfig` (with `Default` and builder setters)
//! whose `build(ctx)` makes the tuner.
//!
//! | technique | file | where | when | band |
//! | --- | --- | --- | --- | --- |
//! | untuned / user tuning | [`fixed`] | both ends | static, before connect | out |
//! | Linux autotuning | [`kernel`] | kernel | dynamic | in |
//! | manual 2 x BDP (Tierney) | [`manual`] | both ends | static, before connect | out |
//! | PSC (Semke, Mahdavi & Mathis) | [`psc`], [`pool`] | sender (receiver: maximum) | dynamic | in |
//! | Dynamic Right-Sizing | [`drs`] | receiver | dynamic | in |
//! | NLANR auto-tuned FTP | [`probe`] | both ends | static after a probe | out |
//! | tcptune's own | [`auto`] | both ends | dynamic, decided early | both |

mod common;

pub mod auto;
pub mod budget;
pub mod drs;
pub mod fixed;
pub mod kernel;
pub mod manual;
pub mod pool;
pub mod probe;
pub mod psc;
