//! The progress line on stderr: which step runs, what it does now, and how long is left. On a
//! terminal one line is redrawn every second; otherwise a line is written per phase.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds a repetition spends outside its stream and TCP_RR (testbed up and down, starting the
/// receivers), until measured.
const OVERHEAD_GUESS: f64 = 1.5;

struct State {
    /// The command the lines are from (`bench`, `soak`).
    command: &'static str,
    started: Instant,
    /// Planned stream + TCP_RR seconds of every step, in order.
    planned: Vec<f64>,
    /// Steps done, and the seconds their overhead took in all.
    done: usize,
    overhead: f64,
    step_started: Instant,
    what: String,
    phase: String,
    phase_started: Instant,
    phase_seconds: f64,
    finished: bool,
}

impl State {
    fn left(&self) -> f64 {
        let per = if self.done > 0 {
            self.overhead / self.done as f64
        } else {
            OVERHEAD_GUESS
        };
        let later: f64 = self
            .planned
            .iter()
            .skip(self.done + 1)
            .map(|p| p + per)
            .sum();
        let current = self
            .planned
            .get(self.done)
            .map(|p| (p + per - self.step_started.elapsed().as_secs_f64()).max(0.0))
            .unwrap_or(0.0);
        later + current
    }

    fn line(&self) -> String {
        let phase = if self.phase_seconds > 0.0 {
            let left = (self.phase_seconds - self.phase_started.elapsed().as_secs_f64()).max(0.0);
            format!("{} ({left:.0} s)", self.phase)
        } else {
            self.phase.clone()
        };
        format!(
            "pvnet {}: [{}/{}] {}: {phase} | {} elapsed, about {} left",
            self.command,
            (self.done + 1).min(self.planned.len()),
            self.planned.len(),
            self.what,
            mmss(self.started.elapsed().as_secs_f64()),
            mmss(self.left()),
        )
    }
}

fn mmss(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

/// A progress reporter; cheap to clone into the measuring code.
#[derive(Clone)]
pub struct Progress {
    state: Arc<Mutex<State>>,
    tty: bool,
}

impl Progress {
    /// `planned`: stream + TCP_RR seconds of each step.
    pub fn new(planned: Vec<f64>) -> Progress {
        Progress::of("bench", planned)
    }

    /// [`Progress::new`] for another command than `bench`, whose name the lines carry.
    pub fn of(command: &'static str, planned: Vec<f64>) -> Progress {
        let now = Instant::now();
        let p = Progress {
            state: Arc::new(Mutex::new(State {
                command,
                started: now,
                planned,
                done: 0,
                overhead: 0.0,
                step_started: now,
                what: String::new(),
                phase: "starting".into(),
                phase_started: now,
                phase_seconds: 0.0,
                finished: false,
            })),
            tty: std::io::stderr().is_terminal(),
        };
        if p.tty {
            let q = p.clone();
            std::thread::spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                let st = q.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.finished {
                    break;
                }
                eprint!("\r\x1b[K{}", st.line());
            });
        }
        p
    }

    /// A step begins: `what` names it (configuration and repetition).
    pub fn step(&self, what: &str) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.what = what.to_string();
        st.step_started = Instant::now();
        drop(st);
        self.phase("starting the testbed", 0.0);
    }

    /// The current step enters a phase expected to last `seconds` (0: unknown).
    pub fn phase(&self, phase: &str, seconds: f64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.phase = phase.to_string();
        st.phase_started = Instant::now();
        st.phase_seconds = seconds;
        if self.tty {
            eprint!("\r\x1b[K{}", st.line());
        } else {
            eprintln!("{}", st.line());
        }
    }

    /// The current step is over.
    pub fn step_done(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let i = st.done;
        let planned = st.planned.get(i).copied().unwrap_or(0.0);
        st.overhead += (st.step_started.elapsed().as_secs_f64() - planned).max(0.0);
        st.done += 1;
    }

    /// Ends the line (before other output).
    pub fn finish(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !st.finished && self.tty {
            eprintln!();
        }
        st.finished = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_counts_the_steps_left() {
        let p = Progress::new(vec![10.0, 10.0, 10.0]);
        {
            let st = p.state.lock().unwrap();
            let left = st.left();
            assert!((left - 3.0 * (10.0 + OVERHEAD_GUESS)).abs() < 0.5, "{left}");
            assert!(st.line().contains("[1/3]"));
        }
        p.finish();
        assert_eq!(mmss(125.4), "2:05");
        // Another command's lines carry its name, not bench's.
        let p = Progress::of("soak", vec![60.0]);
        assert!(p
            .state
            .lock()
            .unwrap()
            .line()
            .starts_with("pvnet soak: [1/1]"));
        p.finish();
    }
}
