//! tcptune's transfer engine: a server and a client moving messages over parallel TCP
//! streams, running a tuner on every stream and reporting what happened.

pub mod report;
