//! A finished bench run: what the report, the plots and results.json are made of.

use serde_json::Value;

use super::measure::{self, Sample};
use super::summary::ConfigSummary;
use super::{paired, scaling};

/// How the run is measured.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub reps: usize,
    pub warmup_stream_seconds: f64,
    pub warmup_rr_seconds: f64,
    pub measure: measure::Params,
    /// Rounds and seconds per TCP_RR run of the paired comparison (0 rounds: none).
    pub paired_rounds: usize,
    pub paired_seconds: f64,
    /// Rounds of the one-testbed guest-scaling comparison (0: none).
    pub scaling_rounds: usize,
    /// Testbeds those rounds are split between.
    pub scaling_testbeds: usize,
}

/// What a `--sweep` ran.
#[derive(Clone, Debug)]
pub struct SweepInfo {
    pub values: Vec<u32>,
    pub references: Vec<String>,
}

/// A finished run: everything the report and results.json are made of.
pub struct Run {
    pub started_utc: String,
    pub started_unix: u64,
    pub revision: String,
    pub wall_seconds: f64,
    pub machine: Value,
    pub params: Params,
    pub configs: Vec<String>,
    pub samples: Vec<Sample>,
    pub summary: Vec<ConfigSummary>,
    pub sweep: Option<SweepInfo>,
    /// The paired TCP_RR comparison, when it ran; why it failed, when it did.
    pub paired: Option<paired::Paired>,
    pub paired_error: Option<String>,
    /// The standing-testbed comparisons of N guests against one (`--sweep guests`), and why any
    /// failed.
    pub one_testbed: Vec<scaling::OneTestbed>,
    pub one_testbed_errors: Vec<String>,
}
