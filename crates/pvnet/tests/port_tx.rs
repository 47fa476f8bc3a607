//! The physical port's transmit side under back-pressure, end to end: a guest streams out of a
//! port whose send buffer is tiny, and the driver domain holds the frames the port refuses
//! instead of dropping them. Needs root.

use crate::common::*;

#[test]
fn a_port_that_pushes_back_loses_no_frame_of_a_guests_stream() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_port_that_pushes_back_loses_no_frame_of_a_guests_stream") {
        return;
    }
    // 4 KiB asked: the kernel's floor, a frame or two in flight.
    let run = Run::up(&["--guests", "1", "--lro", "off", "--port-tx-buffer-kib", "4"]);
    // TCP's retransmitted segments in namespace `role`.
    let retrans = |role: &str| -> u64 {
        let o = pvnet(&["exec", "--id", &run.id, role, "cat", "/proc/net/snmp"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
        let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
        let i = (names.split_whitespace())
            .position(|n| n == "RetransSegs")
            .unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    };
    let before = retrans("g0");
    let bytes = 1 << 30;
    let v = flow(&run, ("g0", "remote", "10.77.0.1"), 5401, bytes, 120).expect("stream out of g0");
    assert_intact(&v, bytes);
    let st = run.stat();
    let (p, d) = (&st["pnic"], &st["daemon"]);
    // The port refused frames for now, again and again, and every one waited and went out.
    assert!(
        u(&p["tx_would_block"]) > 0,
        "the port never pushed back: {p}"
    );
    assert!(u(&d["pnic_tx_deferred"]) > 0, "{d}");
    assert!(
        u(&d["tx_polls_held"]) > 0,
        "the guest's TX was never held: {d}"
    );
    assert_eq!(u(&d["pnic_send_errors"]), 0, "{d}");
    assert_eq!(d["pnic_tx_backlog_drops"].as_u64().unwrap_or(0), 0, "{d}");
    assert!(u(&p["tx_sndbuf"]) < 64 << 10, "{p}");
    // So the guest's TCP saw no loss.
    assert_eq!(
        retrans("g0") - before,
        0,
        "the guest retransmitted: {p} {d}"
    );
}

#[test]
fn the_ports_transmit_buffer_is_set_and_checked() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fails_saying(
        &["up", "--port-tx-buffer-kib", "3"],
        "--port-tx-buffer-kib must be between 4 and 65536, got 3",
    );
    if skip_unless_root("the_ports_transmit_buffer_is_set_and_checked") {
        return;
    }
    let run = Run::up(&["--guests", "1"]);
    // 4 MiB asked; the kernel keeps twice what it is asked for its own bookkeeping.
    assert_eq!(u(&run.stat()["pnic"]["tx_sndbuf"]), 8 << 20);
}
