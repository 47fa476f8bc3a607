//! End to end: `pvnet capture` of the physical port, a guest's bridge port and the guest's own
//! interface while the remote host pings and streams into the guest with aggregation on; each
//! pcap is read back (pcap-file, and tcpdump when installed) and its frames are checked
//! against what was sent. Needs root.

use crate::common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use pvnet_perf::pattern;
use pvnet_perf::proto::{Hello, HELLO_LEN};

const REMOTE: [u8; 4] = [10, 77, 0, 1];
const GUEST: [u8; 4] = [10, 77, 0, 10];
/// The wire's MTU plus the Ethernet header.
const WIRE_FRAME: usize = 1500 + 14;
const STREAM_BYTES: u64 = 4 << 20;
const PINGS: u32 = 5;

/// A `pvnet capture` running in the background, stopped with SIGINT (Ctrl-C).
struct Capture {
    child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    file: PathBuf,
    port: &'static str,
}

impl Capture {
    fn start(run: &Run, port: &'static str, file: PathBuf, extra: &[&str]) -> Capture {
        let mut child = Command::new(exe())
            .args(["capture", "--id", &run.id, port, "-w"])
            .arg(&file)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pvnet capture");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        // It says so once its socket is open: from then on nothing crossing the port is missed.
        let mut line = String::new();
        stderr.read_line(&mut line).expect("capture's first line");
        assert!(line.contains("capturing"), "{port}: {line}");
        Capture {
            child,
            stderr,
            file,
            port,
        }
    }

    /// Ctrl-C; returns (packets captured, dropped) as the command reported them.
    fn stop(self) -> (PathBuf, u64, u64) {
        self.signalled(&[nix::sys::signal::Signal::SIGINT])
    }

    /// Stops the capture process where it is (SIGSTOP): it reads nothing until resumed.
    fn freeze(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    }

    /// Ctrl-C to a frozen capture, then resumes it: the signal is waiting when it runs again.
    fn stop_frozen(self) -> (PathBuf, u64, u64) {
        use nix::sys::signal::Signal::{SIGCONT, SIGINT};
        self.signalled(&[SIGINT, SIGCONT])
    }

    fn signalled(mut self, signals: &[nix::sys::signal::Signal]) -> (PathBuf, u64, u64) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        for &s in signals {
            nix::sys::signal::kill(pid, s).expect("signal the capture");
        }
        let status = self.child.wait().expect("wait");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stderr, &mut rest).unwrap();
        assert!(status.success(), "{}: {status}: {rest}", self.port);
        // "pvnet: N packets captured on PORT (why), D dropped"
        let words: Vec<&str> = rest.split_whitespace().collect();
        let n = words[1].parse().unwrap_or_else(|_| panic!("{rest}"));
        let d = words[words.len() - 2]
            .parse()
            .unwrap_or_else(|_| panic!("{rest}"));
        (self.file, n, d)
    }
}

/// The frames of a pcap file (checking its header).
fn read_pcap(file: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(file).unwrap()).unwrap();
    assert_eq!(r.header().datalink, DataLink::ETHERNET);
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(p.orig_len as usize, p.data.len(), "captured whole");
        out.push(p.data.into_owned());
    }
    out
}

/// The frames a stopped capture wrote, checked against its own report (file, packets,
/// dropped): nothing dropped, and the file holds as many as it counted.
fn frames_of(port: &str, (file, n, dropped): (PathBuf, u64, u64)) -> (PathBuf, Vec<Vec<u8>>) {
    assert_eq!(dropped, 0, "{port}: the capture dropped packets");
    let frames = read_pcap(&file);
    assert_eq!(
        frames.len() as u64,
        n,
        "{port}: the file holds what was counted"
    );
    (file, frames)
}

/// An IPv4 packet in a frame.
struct Ipv4<'f> {
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
    /// The IP payload.
    l4: &'f [u8],
}

fn ipv4(f: &[u8]) -> Option<Ipv4<'_>> {
    if f.len() < 34 || f[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &f[14..];
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let end = total.min(ip.len());
    Some(Ipv4 {
        proto: ip[9],
        src: ip[12..16].try_into().unwrap(),
        dst: ip[16..20].try_into().unwrap(),
        l4: ip.get(ihl..end)?,
    })
}

/// What a capture shows of the ping and the stream.
#[derive(Default)]
struct Seen {
    /// Echo requests remote -> guest and replies guest -> remote, by (id, seq).
    requests: BTreeSet<(u16, u16)>,
    replies: BTreeSet<(u16, u16)>,
    /// The stream's SYN sequence number, and its data: (offset in the stream, bytes).
    isn: Option<u32>,
    data: Vec<(u32, Vec<u8>)>,
    largest_frame: usize,
    largest_tcp_frame: usize,
}

fn inspect(frames: &[Vec<u8>]) -> Seen {
    let mut s = Seen::default();
    for f in frames {
        s.largest_frame = s.largest_frame.max(f.len());
        let Some(Ipv4 {
            proto,
            src,
            dst,
            l4,
        }) = ipv4(f)
        else {
            continue;
        };
        match proto {
            1 if l4.len() >= 8 => {
                let key = (
                    u16::from_be_bytes([l4[4], l4[5]]),
                    u16::from_be_bytes([l4[6], l4[7]]),
                );
                // perf ping's payload: 56 bytes of its pattern for this sequence number.
                let payload: Vec<u8> = (0..56)
                    .map(|i| pvnet_perf::ping::payload_byte(key.1, i))
                    .collect();
                match (l4[0], src, dst) {
                    (8, REMOTE, GUEST) => {
                        assert_eq!(&l4[8..], &payload[..], "echo request payload");
                        s.requests.insert(key);
                    }
                    (0, GUEST, REMOTE) => {
                        assert_eq!(&l4[8..], &payload[..], "echo reply payload");
                        s.replies.insert(key);
                    }
                    _ => {}
                }
            }
            6 if l4.len() >= 20 && src == REMOTE && dst == GUEST => {
                let dport = u16::from_be_bytes([l4[2], l4[3]]);
                if dport != 5201 {
                    continue;
                }
                s.largest_tcp_frame = s.largest_tcp_frame.max(f.len());
                let seq = u32::from_be_bytes(l4[4..8].try_into().unwrap());
                let doff = usize::from(l4[12] >> 4) * 4;
                if l4[13] & 0x02 != 0 {
                    assert!(!matches!(s.isn, Some(i) if i != seq), "one stream");
                    s.isn = Some(seq);
                }
                if l4.len() > doff {
                    s.data.push((seq, l4[doff..].to_vec()));
                }
            }
            _ => {}
        }
    }
    s
}

/// Checks that the stream's bytes in the capture are what the sender sent: its hello, then the
/// pattern; and that together they cover the whole stream.
fn check_stream(port: &str, s: &Seen) {
    let isn = s
        .isn
        .unwrap_or_else(|| panic!("{port}: no SYN of the stream"));
    let total = HELLO_LEN as u64 + STREAM_BYTES;
    let mut covered: BTreeMap<u64, u64> = BTreeMap::new();
    let mut hello = vec![None; HELLO_LEN];
    for (seq, bytes) in &s.data {
        let off = u64::from(seq.wrapping_sub(isn).wrapping_sub(1));
        assert!(off + bytes.len() as u64 <= total, "{port}: past the end");
        for (k, &b) in bytes.iter().enumerate() {
            let at = off + k as u64;
            if at < HELLO_LEN as u64 {
                let h = &mut hello[at as usize];
                assert!(
                    !matches!(*h, Some(x) if x != b),
                    "{port}: hello byte {at} differs"
                );
                *h = Some(b);
            } else {
                let want = pattern::byte_at(at - HELLO_LEN as u64);
                assert_eq!(b, want, "{port}: stream byte {at}");
            }
        }
        let e = covered.entry(off).or_insert(0);
        *e = (*e).max(bytes.len() as u64);
    }
    let hello: Vec<u8> = hello
        .into_iter()
        .map(|b| b.unwrap_or_else(|| panic!("{port}: hello not captured")))
        .collect();
    match Hello::decode(&hello.try_into().unwrap()) {
        Ok(Hello::Stream { max_bytes, .. }) => assert_eq!(max_bytes, STREAM_BYTES),
        other => panic!("{port}: hello {other:?}"),
    }
    // Every byte of the stream is in some segment.
    let mut upto = 0u64;
    for (&off, &len) in &covered {
        assert!(off <= upto, "{port}: bytes {upto}..{off} not captured");
        upto = upto.max(off + len);
    }
    assert_eq!(upto, total, "{port}: the stream's end not captured");
}

/// tcpdump, where installed, reads the file and shows the same echo requests.
fn tcpdump_agrees(file: &Path, requests: usize) {
    let Ok(o) = Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(file)
        .arg("icmp[icmptype] == icmp-echo")
        .output()
    else {
        eprintln!("tcpdump not installed: the pcap-file reader alone checked the file");
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "tcpdump -r {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let lines = out
        .lines()
        .filter(|l| l.contains("ICMP echo request"))
        .count();
    assert_eq!(lines, requests, "{out}");
}

#[test]
fn captures_show_what_was_sent_at_every_port() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("captures_show_what_was_sent_at_every_port") {
        return;
    }
    let run = Run::up(&["--guests", "1", "--lro", "adaptive"]);
    let dir = std::env::temp_dir().join(format!("pvnet-capture-{}", run.id));
    std::fs::create_dir_all(&dir).unwrap();
    let caps: Vec<Capture> = ["pnic", "vif0", "g0"]
        .into_iter()
        .map(|p| Capture::start(&run, p, dir.join(format!("{p}.pcap")), &[]))
        .collect();
    ping(&run, "remote", "10.77.0.10", PINGS);
    stream_intact(&run, "g0", "10.77.0.10", STREAM_BYTES);
    let mut seen = BTreeMap::new();
    for c in caps {
        let port = c.port;
        let (file, frames) = frames_of(port, c.stop());
        let s = inspect(&frames);
        // Every ping (ours, and the server helper's readiness pings) is there both ways.
        assert!(
            s.requests.len() >= PINGS as usize,
            "{port}: {:?}",
            s.requests
        );
        assert_eq!(s.requests, s.replies, "{port}: every request answered");
        check_stream(port, &s);
        tcpdump_agrees(&file, s.requests.len());
        seen.insert(port, s);
    }
    // The same echoes crossed every port.
    assert_eq!(seen["pnic"].requests, seen["vif0"].requests);
    assert_eq!(seen["pnic"].requests, seen["g0"].requests);
    // The wire carries wire frames; the guest's port and interface see aggregates.
    assert!(
        seen["pnic"].largest_frame <= WIRE_FRAME,
        "pnic: a {}-byte frame",
        seen["pnic"].largest_frame
    );
    for p in ["vif0", "g0"] {
        assert!(
            seen[p].largest_tcp_frame > WIRE_FRAME,
            "{p}: no aggregate (largest {})",
            seen[p].largest_tcp_frame
        );
    }
    // The daemon's capture ended with its reader.
    let st = run.stat();
    assert_eq!(u(&st["capture"]["started"]), 1, "{}", st["capture"]);
    assert_eq!(u(&st["capture"]["ended"]), 1, "{}", st["capture"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A capture behind its port (here frozen while the remote host pings the guest) still
/// writes, on Ctrl-C, every packet the port saw before it: they wait in its socket, and it
/// reads them before closing the file. Both kinds of source: the physical port's `AF_PACKET`
/// socket and the daemon's records of a bridge port.
#[test]
fn a_capture_that_fell_behind_keeps_what_came_before_ctrl_c() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("a_capture_that_fell_behind_keeps_what_came_before_ctrl_c") {
        return;
    }
    const BEHIND: u32 = 10;
    let run = Run::up(&["--guests", "1"]);
    let dir = std::env::temp_dir().join(format!("pvnet-capture-{}-behind", run.id));
    std::fs::create_dir_all(&dir).unwrap();
    let caps: Vec<Capture> = ["pnic", "vif0"]
        .into_iter()
        .map(|p| Capture::start(&run, p, dir.join(format!("{p}.pcap")), &[]))
        .collect();
    for c in &caps {
        c.freeze();
    }
    ping(&run, "remote", "10.77.0.10", BEHIND);
    for c in caps {
        let port = c.port;
        let (_, frames) = frames_of(port, c.stop_frozen());
        let s = inspect(&frames);
        assert_eq!(
            s.requests.len(),
            BEHIND as usize,
            "{port}: {:?}",
            s.requests
        );
        assert_eq!(s.requests, s.replies, "{port}: every request answered");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn capture_errors_say_what_is_wrong() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if skip_unless_root("capture_errors_say_what_is_wrong") {
        return;
    }
    fails_saying(
        &["capture", "--id", "fffff0", "pnic", "-w", "/dev/null"],
        "no pvnet run with id fffff0",
    );
    let run = Run::up(&["--guests", "1"]);
    let id = run.id.as_str();
    fails_saying(
        &["capture", "--id", id, "eth0", "-w", "/dev/null"],
        "unknown port \"eth0\"",
    );
    fails_saying(
        &["capture", "--id", id, "vif1", "-w", "/dev/null"],
        "no vif1: run",
    );
    fails_saying(
        &["capture", "--id", id, "g4", "-w", "/dev/null"],
        "no g4: run",
    );
    // A capture refused at its port leaves the file it was given as it was.
    let kept = std::env::temp_dir().join(format!("pvnet-capture-{id}-kept.pcap"));
    std::fs::write(&kept, b"an earlier capture").unwrap();
    fails_saying(
        &["capture", "--id", id, "g4", "-w", kept.to_str().unwrap()],
        "no g4: run",
    );
    assert_eq!(std::fs::read(&kept).unwrap(), b"an earlier capture");
    let _ = std::fs::remove_file(&kept);
    // A count ends a capture by itself; the file is complete.
    let file = std::env::temp_dir().join(format!("pvnet-capture-{id}-count.pcap"));
    let mut c = Capture::start(&run, "vif0", file.clone(), &["-c", "2"]);
    ping(&run, "remote", "10.77.0.10", 2);
    assert!(c.child.wait().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut c.stderr, &mut rest).unwrap();
    assert!(
        rest.contains("2 packets captured on vif0 (count reached)"),
        "{rest}"
    );
    let frames = read_pcap(&file);
    assert_eq!(frames.len(), 2);
    let _ = std::fs::remove_file(&file);
}
