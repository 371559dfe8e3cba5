//! Benchmarks that start real components through the harness: ignored tests that assert only
//! correctness and print their figures (`bench/README.md` has the commands and the current figures).

mod agent_commands;
mod preview;
mod sharing;
mod spool;
mod storm;
