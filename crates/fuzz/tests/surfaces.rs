//! One fuzz run per surface (see `src/lib.rs` for the budget: a few cases by default, or
//! `PLAIT_FUZZ_SECONDS` per surface). A failure lists every finding with its input.

mod common;

use plait_fuzz::{assert_clean, fuzz};

fn run(surface: &str) {
    let (seeds, check) = common::surface(surface);
    assert_clean(&fuzz(surface, &seeds, check));
}

#[test]
fn flags() {
    run("flags");
}

#[test]
fn hf_config() {
    run("hf_config");
}

#[test]
fn cluster_toml() {
    run("cluster_toml");
}

#[test]
fn profile_json() {
    run("profile_json");
}

#[test]
fn placement_json() {
    run("placement_json");
}

#[test]
fn onnx() {
    run("onnx");
}

#[test]
fn plan_string() {
    run("plan_string");
}

#[test]
fn pipeline_layout() {
    run("pipeline_layout");
}

#[test]
fn data() {
    run("data");
}

#[test]
fn checkpoint() {
    run("checkpoint");
}
