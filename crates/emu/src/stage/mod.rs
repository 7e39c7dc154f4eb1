//! The pure stages of an emulated path. Each is a state machine fed `now` and packets:
//!
//! 1. [`RandomLoss`]: drops each wire packet with a fixed probability (seeded).
//! 2. [`Bottleneck`]: a drop-tail queue in front of a link of a given rate; packets leave
//!    one after the other at the line rate (serialization), never in bursts.
//! 3. [`DelayLine`]: propagation delay plus optional jitter, order-preserving unless asked.
//!
//! # Calling order
//!
//! For every stage: [`Stage::push`] packets as they arrive, then take whatever is ready with
//! [`Stage::poll_out`] until it returns `None`, and sleep until [`Stage::poll_timeout`] (or
//! the next arrival) before polling again. `now` must never go backwards.
//!
//! Stages never look at a clock, and they time packets by when each one *should* have
//! arrived (`Packet::due`, set by the previous stage), not by when the driver got around
//! to calling them, so a late poll does not shift the schedule of later packets.

mod bottleneck;
mod delay;
mod loss;

pub use bottleneck::Bottleneck;
pub use delay::DelayLine;
pub use loss::RandomLoss;

use crate::packet::Packet;
use tcptune_core::Time;

/// A stage of an emulated path.
pub trait Stage {
    /// A packet arrives at `now` (its `due` time is when it should have arrived).
    fn push(&mut self, now: Time, packet: Packet);
    /// The next packet that is ready to leave by `now`, in order.
    fn poll_out(&mut self, now: Time) -> Option<Packet>;
    /// When the next packet will be ready (`None` if the stage is empty).
    fn poll_timeout(&self) -> Option<Time>;
}
