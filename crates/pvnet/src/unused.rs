//! Options given on the command line that the run they describe would not use. Each is refused
//! with its name and the reason, before anything starts, rather than taken without effect: an
//! operator who asks for `--ring-prefetch 16` on a ring that has no slots to prefetch should
//! learn it from the command, not from figures that did not move.

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::ArgMatches;
use pvnet_dd::netback::Mechanism;

use crate::bench::{ScenarioKind, SweepKind};
use crate::config::{Mode, PortRing};

/// Whether option `id` (its field's name) was given on the command line, rather than left at
/// its default.
fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

/// When `when` holds, none of the options `ids` applies, for the reason `why` ("does not apply
/// `why`").
struct Rule<'a> {
    when: bool,
    ids: &'a [&'a str],
    why: &'a str,
}

/// The first option of a rule that holds which was given anyway, as an error.
fn refuse(m: &ArgMatches, rules: &[Rule]) -> Result<()> {
    for r in rules.iter().filter(|r| r.when) {
        if let Some(id) = r.ids.iter().find(|id| given(m, id)) {
            bail!("--{} does not apply {}", id.replace('_', "-"), r.why);
        }
    }
    Ok(())
}

/// Checks the options of the command line `m` (the whole command's matches).
pub fn check(m: &ArgMatches) -> Result<()> {
    match m.subcommand() {
        Some(("up", m)) => check_up(m),
        Some(("bench", m)) => check_bench(m),
        _ => Ok(()),
    }
}

/// `pvnet up`: what each mode, port and guest kind leaves without use. The combinations that
/// contradict each other (`--lro` with `--mode linux`, `--hvm` with `--mode relay`, ...) are
/// refused by `up` itself, with their own messages.
fn check_up(m: &ArgMatches) -> Result<()> {
    let mode = *m.get_one::<Mode>("mode").expect("has a default");
    let grant = *m.get_one::<Mechanism>("grant").expect("has a default");
    let port_frames = crate::config::frame_port(m.get_flag("port_frames"), grant);
    let port_ring = *m.get_one::<PortRing>("port_ring").expect("has a default");
    let hvm = *m.get_one::<usize>("hvm").expect("has a default");
    let pv = mode != Mode::Linux;
    if mode == Mode::Linux && given(m, "guests") && m.get_one::<usize>("guests") != Some(&1) {
        bail!(
            "--guests: --mode linux has one receiver, the driver domain's own stack (10.77.0.2); \
             more guests need --mode xen or relay"
        );
    }
    refuse(
        m,
        &[
            Rule {
                when: mode == Mode::Linux,
                ids: &[
                    "budget",
                    "ring_frames",
                    "port_queues",
                    "ring_prefetch",
                    "port_tx_buffer_kib",
                    "port_ring",
                    "port_ring_block_kib",
                    "lro_mode",
                    "guest_gso",
                    "rx_queue_packets",
                    "rx_queue_bytes",
                    "persistent_grants",
                    "lro_flows_per_guest",
                    "g2g",
                    "guest_cgroups",
                ],
                why: "with --mode linux: no driver domain's data path, no guest (the driver \
                      domain's own stack receives)",
            },
            Rule {
                when: mode == Mode::Relay,
                ids: &[
                    "rx_queue_packets",
                    "rx_queue_bytes",
                    "persistent_grants",
                    "g2g",
                ],
                why: "with --mode relay: no netback and no grants (the daemon writes into the \
                      guests' TAPs)",
            },
            Rule {
                when: pv && port_frames,
                ids: &[
                    "ring_prefetch",
                    "port_ring",
                    "lro_mode",
                    "bo",
                    "lro_flows_per_guest",
                ],
                why: "to the frame port (--grant flip, --port-frames): no packet ring, and no \
                      aggregation",
            },
            Rule {
                when: pv && !port_frames && port_ring == PortRing::V3,
                ids: &["ring_frames", "ring_prefetch"],
                why: "to --port-ring v3: its ring is 64 MiB of blocks, not slots \
                      (--port-ring-block-kib sets their size)",
            },
            Rule {
                when: mode == Mode::Xen && grant != Mechanism::Persistent,
                ids: &["persistent_grants"],
                why: "without --grant persistent (the table of persistent grants)",
            },
            Rule {
                when: hvm == 0,
                ids: &["hvm_path", "exit_cost_ns"],
                why: "without --hvm N (no HVM guest)",
            },
        ],
    )
}

/// What a `pvnet bench` runs, by `--sweep` and `--scenario`: each runs different code, which
/// reads different options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bench {
    /// No --sweep, no --scenario (with --guests N or not).
    Tables,
    Timeout,
    Guests,
    Pktsize,
    RecordSize,
    /// --scenario without --sweep.
    Scenario,
    /// --sweep guests --scenario: issue 22's whole study.
    Study,
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::Tables => "the tables (no --sweep, no --scenario)",
            Bench::Timeout => "--sweep timeout",
            Bench::Guests => "--sweep guests",
            Bench::Pktsize => "--sweep pktsize",
            Bench::RecordSize => "--sweep record-size",
            Bench::Scenario => "--scenario",
            Bench::Study => "--sweep guests --scenario",
        }
    }
}

/// The options of `pvnet bench` that some of its runs do not read, and the runs that do. The
/// others (--reps, --out, --configs, ...) apply to every run or are checked where they are
/// read (--configs, --guests and --direction by --sweep pktsize, --json and --tool by the
/// workloads, --restarts, --stream-pace and --scenario-configs by theirs).
const BENCH_OPTIONS: &[(&str, &[Bench])] = {
    use Bench::*;
    const NOT_PKTSIZE: &[Bench] = &[Tables, Timeout, Guests, RecordSize, Scenario, Study];
    const STREAMS: &[Bench] = &[Tables, Timeout, Guests, Scenario, Study];
    const PAIRED: &[Bench] = &[Tables, Timeout, Guests, Study];
    &[
        (
            "quick",
            &[Tables, Timeout, Guests, Pktsize, Scenario, Study],
        ),
        (
            "duration",
            &[Tables, Timeout, Guests, Pktsize, Scenario, Study],
        ),
        ("rr_duration", STREAMS),
        ("msg_size", STREAMS),
        ("tool", STREAMS),
        ("json", NOT_PKTSIZE),
        ("placement", &[Tables, Timeout, Guests, Pktsize, Study]),
        ("rate", &[Pktsize]),
        ("paired", PAIRED),
        ("paired_rounds", PAIRED),
        ("paired_seconds", PAIRED),
        ("scaling_rounds", &[Guests, Study]),
        ("scaling_testbeds", &[Guests, Study]),
        ("ring_frames", NOT_PKTSIZE),
        ("port_queues", NOT_PKTSIZE),
        ("ring_prefetch", NOT_PKTSIZE),
        ("budget", NOT_PKTSIZE),
        ("mtu", NOT_PKTSIZE),
        (
            "guest_cgroups",
            &[Tables, Timeout, Guests, RecordSize, Study],
        ),
        (
            "exit_cost_ns",
            &[Tables, Timeout, Guests, RecordSize, Study],
        ),
        (
            "sweep_values",
            &[Timeout, Guests, Pktsize, RecordSize, Study],
        ),
        ("guests", &[Tables, Pktsize, RecordSize]),
        ("records", &[RecordSize]),
        ("record_rate", &[RecordSize]),
    ]
};

/// `pvnet bench`: an option given to a run that does not read it is refused, naming the runs
/// it belongs to.
fn check_bench(m: &ArgMatches) -> Result<()> {
    let sweep = m.get_one::<SweepKind>("sweep").copied();
    let scenarios: Vec<ScenarioKind> = m
        .get_many::<ScenarioKind>("scenario")
        .map(|v| v.copied().collect())
        .unwrap_or_default();
    let run = match (scenarios.is_empty(), sweep) {
        (true, None) => Bench::Tables,
        (true, Some(SweepKind::Timeout)) => Bench::Timeout,
        (true, Some(SweepKind::Guests)) => Bench::Guests,
        (true, Some(SweepKind::Pktsize)) => Bench::Pktsize,
        (true, Some(SweepKind::RecordSize)) => Bench::RecordSize,
        (false, None) => Bench::Scenario,
        (false, Some(SweepKind::Guests)) => Bench::Study,
        // Refused by the bench itself.
        (false, Some(_)) => return Ok(()),
    };
    for (id, runs) in BENCH_OPTIONS {
        if given(m, id) && !runs.contains(&run) {
            let names: Vec<&str> = runs.iter().map(|r| r.name()).collect();
            bail!(
                "--{} belongs to {}, not to {}",
                id.replace('_', "-"),
                names.join(", "),
                run.name()
            );
        }
    }
    if run == Bench::Scenario
        && given(m, "rr_duration")
        && !scenarios.contains(&ScenarioKind::Neighbour)
    {
        bail!(
            "--rr-duration belongs to --scenario neighbour (mixed's TCP_RR runs as long as its \
             stream, --duration; restart runs none)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    fn check(args: &[&str]) -> Result<(), String> {
        let m = crate::Cli::command()
            .try_get_matches_from(std::iter::once("pvnet").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        super::check(&m).map_err(|e| e.to_string())
    }

    #[track_caller]
    fn refused(args: &[&str], want: &str) {
        match check(args) {
            Err(e) => assert!(e.contains(want), "{args:?}: {e}"),
            Ok(()) => panic!("{args:?} was accepted"),
        }
    }

    #[test]
    fn the_options_a_run_would_not_read_are_refused_and_named() {
        for (args, want) in [
            (
                &["up", "--mode", "linux", "--ring-prefetch", "8"][..],
                "--ring-prefetch does not apply with --mode linux",
            ),
            (
                &["up", "--mode", "linux", "--rx-queue-bytes", "1M"],
                "--rx-queue-bytes does not apply with --mode linux",
            ),
            (
                &["up", "--mode", "linux", "--guests", "3"],
                "--guests: --mode linux",
            ),
            (
                &["up", "--mode", "relay", "--g2g", "off"],
                "--g2g does not apply with --mode relay",
            ),
            (
                &["up", "--grant", "flip", "--ring-prefetch", "0"],
                "--ring-prefetch does not apply to the frame port",
            ),
            (
                &["up", "--port-frames", "--bo"],
                "--bo does not apply to the frame port",
            ),
            (
                &["up", "--port-ring", "v3", "--ring-frames", "2048"],
                "--ring-frames does not apply to --port-ring v3",
            ),
            (
                &["up", "--persistent-grants", "64"],
                "--persistent-grants does not apply without --grant persistent",
            ),
            (
                &["up", "--hvm-path", "max"],
                "--hvm-path does not apply without --hvm",
            ),
            (
                &["up", "--exit-cost-ns", "500"],
                "--exit-cost-ns does not apply without --hvm",
            ),
            (
                &["bench", "--sweep", "pktsize", "--json", "r.json"],
                "--json belongs to the tables (no --sweep, no --scenario), --sweep timeout, \
             --sweep guests, --sweep record-size, --scenario, --sweep guests --scenario, not to \
             --sweep pktsize",
            ),
            (
                &["bench", "--sweep", "pktsize", "--mtu", "9000"],
                "--mtu belongs to",
            ),
            (
                &["bench", "--sweep", "record-size", "--duration", "3"],
                "--duration belongs to",
            ),
            (
                &["bench", "--sweep", "record-size", "--msg-size", "4096"],
                "not to --sweep record-size",
            ),
            (
                &["bench", "--scenario", "mixed", "--placement", "spread"],
                "--placement belongs to",
            ),
            (
                &["bench", "--scenario", "neighbour", "--guest-cgroups", "off"],
                "not to --scenario",
            ),
            (
                &["bench", "--scenario", "mixed,restart", "--rr-duration", "2"],
                "--rr-duration belongs to --scenario neighbour",
            ),
            (
                &["bench", "--sweep", "guests", "--guests", "4"],
                "--guests belongs to the tables (no --sweep, no --scenario), --sweep pktsize, \
             --sweep record-size, not to --sweep guests",
            ),
            (
                &["bench", "--sweep", "timeout", "--guests", "2"],
                "not to --sweep timeout",
            ),
            (
                &["bench", "--sweep-values", "1,2"],
                "--sweep-values belongs to",
            ),
            (
                &["bench", "--records", "10"],
                "--records belongs to --sweep record-size",
            ),
            (
                &["bench", "--rate", "1k"],
                "--rate belongs to --sweep pktsize",
            ),
            (
                &["bench", "--scaling-rounds", "0"],
                "--scaling-rounds belongs to --sweep guests",
            ),
            (
                &["bench", "--configs", "xen", "--scaling-testbeds", "2"],
                "--scaling-testbeds belongs to --sweep guests",
            ),
            (
                &["bench", "--scenario", "neighbour", "--paired-rounds", "10"],
                "--paired-rounds belongs to",
            ),
        ] {
            refused(args, want);
        }
    }

    #[test]
    fn every_default_and_what_a_run_reads_are_taken() {
        for args in [
            &["up"][..],
            &["up", "--mode", "linux"],
            &[
                "up",
                "--mode",
                "linux",
                "--guests",
                "1",
                "--mtu",
                "9000",
                "--port-gro",
            ],
            &["up", "--mode", "relay", "--guests", "4", "--budget", "128"],
            &[
                "up",
                "--mode",
                "relay",
                "--lro",
                "adaptive",
                "--lro-flows-per-guest",
                "8",
            ],
            &[
                "up",
                "--grant",
                "flip",
                "--ring-frames",
                "2048",
                "--budget",
                "32",
            ],
            &[
                "up",
                "--port-ring",
                "v3",
                "--port-ring-block-kib",
                "512",
                "--port-gro",
            ],
            &["up", "--grant", "persistent", "--persistent-grants", "64"],
            &[
                "up",
                "--hvm",
                "1",
                "--hvm-path",
                "max",
                "--exit-cost-ns",
                "500",
            ],
            // Aggregation off at start: `pvnet set --lro` may turn it on later.
            &["up", "--lro", "off", "--lro-mode", "page", "--bo"],
            &["bench"],
            &[
                "bench",
                "--quick",
                "--guests",
                "4",
                "--placement",
                "spread",
                "--mtu",
                "9000",
            ],
            &[
                "bench",
                "--sweep",
                "timeout",
                "--sweep-values",
                "10,100",
                "--paired-rounds",
                "5",
            ],
            &[
                "bench",
                "--sweep",
                "guests",
                "--scaling-rounds",
                "4",
                "--scaling-testbeds",
                "2",
            ],
            &[
                "bench",
                "--sweep",
                "pktsize",
                "--rate",
                "1k",
                "--placement",
                "same",
                "--quick",
            ],
            &[
                "bench",
                "--sweep",
                "record-size",
                "--records",
                "5",
                "--record-rate",
                "0",
            ],
            &[
                "bench",
                "--sweep",
                "record-size",
                "--json",
                "r.json",
                "--budget",
                "32",
            ],
            &[
                "bench",
                "--scenario",
                "neighbour,mixed",
                "--rr-duration",
                "2",
                "--msg-size",
                "4096",
            ],
            &[
                "bench",
                "--sweep",
                "guests",
                "--scenario",
                "mixed",
                "--paired-rounds",
                "8",
            ],
        ] {
            assert_eq!(check(args), Ok(()), "{args:?}");
        }
    }
}
