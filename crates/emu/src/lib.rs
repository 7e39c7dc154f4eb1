//! The user-space WAN emulator.
