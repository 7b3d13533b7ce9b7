//! The worker MPM, rebuilt: module and hooks (`module`), directives (`config`),
//! restart-proof state (`retained`), the parent process (`parent`), a child's set-up
//! and shutdown (`child`), its listener and worker threads, and scoreboard access.

pub mod child;
pub mod config;
pub mod handoff;
pub mod listener;
pub mod module;
pub mod parent;
pub mod retained;
pub mod scoreboard;
pub mod worker;
