//! Guest to guest through the driver domain in one copy: a verified GiB TCP stream from guest
//! 0 to guest 1 under the default mechanism (`copy`), whose frames go from the sender's grants
//! straight into the receiver's (`daemon.g2g` in `pvnet stat`); and the same stream with the
//! one-copy path off (`pvnet set --g2g off`), where no frame takes it. Needs root.

use crate::common::*;

const GIB: u64 = 1 << 30;

/// The single-copy deliveries `pvnet stat` shows: the path's count, and the sum over both
/// vifs of what each sent and received that way (they must agree exactly).
fn single_copies(run: &Run) -> (u64, u64, u64) {
    let st = run.stat();
    let path = u(&st["daemon"]["g2g"]["single_copy_packets"]);
    let vifs = st["vifs"].as_array().expect("vifs");
    let tx: u64 = vifs
        .iter()
        .map(|v| u(&v["netback"]["tx_direct_packets"]))
        .sum();
    let rx: u64 = vifs
        .iter()
        .map(|v| u(&v["netback"]["rx_direct_packets"]))
        .sum();
    (path, tx, rx)
}

#[test]
fn a_gib_from_guest_to_guest_arrives_intact_in_one_copy() {
    if skip_unless_root("a_gib_from_guest_to_guest_arrives_intact_in_one_copy") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    let v = flow(&run, ("g0", "g1", "10.77.0.11"), 5301, GIB, 120)
        .unwrap_or_else(|e| panic!("g0 -> g1: {e}"));
    assert_intact(&v, GIB);
    let (path, tx, rx) = single_copies(&run);
    // Every data segment and every ACK between the guests can go this way; some take the
    // whole-copy way (a receiver without buffers posted at that instant, ARP broadcasts).
    assert!(path > 0, "no frame went guest to guest in one copy");
    assert_eq!((tx, rx), (path, path), "the vifs and the path disagree");
    let st = run.stat();
    let g = &st["daemon"]["g2g"];
    // The payload crossed grant to grant: at least most of the GiB.
    assert!(
        u(&g["single_copy_bytes"]) + u(&g["head_bytes"]) >= GIB / 2,
        "{g}"
    );
    assert_eq!(u(&g["sender_failed"]) + u(&g["receiver_failed"]), 0, "{g}");
}

#[test]
fn with_the_one_copy_path_off_guest_to_guest_streams_intact_the_old_way() {
    if skip_unless_root("with_the_one_copy_path_off_guest_to_guest_streams_intact_the_old_way") {
        return;
    }
    let run = Run::up(&["--guests", "2"]);
    // A request with a change the run cannot take is refused whole: g2g stays on.
    let out = pvnet(&["set", "--id", &run.id, "--g2g", "off", "--hvm-path", "max"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no HVM guest"),
        "{err}"
    );
    assert_eq!(run.stat()["settings"]["g2g"], true);
    ok(&["set", "--id", &run.id, "--g2g", "off"]);
    assert_eq!(run.stat()["settings"]["g2g"], false);
    let v = flow(&run, ("g0", "g1", "10.77.0.11"), 5302, GIB, 120)
        .unwrap_or_else(|e| panic!("g0 -> g1: {e}"));
    assert_intact(&v, GIB);
    assert_eq!(single_copies(&run), (0, 0, 0));
}
