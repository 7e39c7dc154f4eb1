//! Host audit (`doctor`) and live connection view (`watch`).
