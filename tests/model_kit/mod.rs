//! The model: random collections, filters, find options and pipelines, and a brute-force
//! evaluator of each that shares no code with the engine.
// Each test crate uses a different part of the model.
#![allow(dead_code)]

pub mod data;
pub mod filters;
pub mod harness;
pub mod matcher;
pub mod order;
pub mod pipegen;
pub mod pipeline;
pub mod project;
