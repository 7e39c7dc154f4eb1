//! One file per tuning technique. Each has an `XConfig` (with `Default` and builder setters)
//! whose `build(ctx)` makes the tuner.

pub mod fixed;
pub mod kernel;
