//! `pvnet capture <port> [-w FILE]`: packets at any port of a run, as a pcap file
//! (LINKTYPE_ETHERNET, nanosecond timestamps) that tcpdump and Wireshark read.
//!
//! Ports, as a user sees them:
//! - `pnic`: the physical port, the driver domain's veth end: wire frames as its kernel sees
//!   them (what the remote host sends, and what the daemon sends out);
//! - `dd`: the driver domain's own stack port, its TAP `pvdd0`;
//! - `g<i>`: guest i's `eth0` inside its namespace: what the guest's kernel receives (an
//!   aggregate is one large TCP segment) and sends;
//! - `vif<i>`: guest i's port of the bridge, inside the daemon's data path: packets as the
//!   bridge hands them to netback (an aggregate is one packet) and as the guest sent them.
//!
//! `pnic`, `dd` and `g<i>` are captured by this process with an `AF_PACKET` socket opened in
//! the port's namespace: the daemon does nothing for them. `vif<i>` is the daemon's: an admin
//! request answers with a socket on which the data path writes one record per packet
//! ([`pvnet_dd::capture`]); records it had to drop (the socket full) are counted and reported.
//! Without a capture nothing of this runs.
//!
//! The capture ends after `-c N` packets, after `--duration`, on Ctrl-C (SIGINT, SIGTERM,
//! SIGHUP), when the reader of the output goes away, or when the run goes down; the file is
//! complete in every case. On Ctrl-C and at the end of `--duration` the packets the port saw
//! until then and the capture had not read yet (a capture behind a busy port has many in its
//! socket) are still written: only those stamped later are left out.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, IoSliceMut, IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, recvmsg, ControlMessageOwned, MsgFlags};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use pvnet_dd::capture::{read_record, MAX_RECORD, SNAPLEN};

use crate::admin::{self, AdminReply, AdminRequest};
use crate::rundir::{self, RunInfo};

/// The driver domain's stack port (see the daemon).
const DD_TAP: &str = "pvdd0";
/// A guest's interface inside its namespace.
const GUEST_IF: &str = "eth0";
/// Receive buffer asked for on an `AF_PACKET` capture socket: a stream's burst waits there
/// while this process writes the file.
const PACKET_RCVBUF: usize = 32 << 20;

/// A port of a run, as `pvnet capture` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    Pnic,
    Dd,
    Guest(usize),
    Vif(usize),
}

impl FromStr for Port {
    type Err = String;

    fn from_str(s: &str) -> Result<Port, String> {
        let index = |rest: &str| -> Option<usize> {
            (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
                .then(|| rest.parse().ok())
                .flatten()
        };
        match s {
            "pnic" => return Ok(Port::Pnic),
            "dd" => return Ok(Port::Dd),
            _ => {}
        }
        if let Some(i) = s.strip_prefix("vif").and_then(index) {
            return Ok(Port::Vif(i));
        }
        if let Some(i) = s.strip_prefix('g').and_then(index) {
            return Ok(Port::Guest(i));
        }
        Err(format!(
            "unknown port {s:?}: expected pnic (the physical port), dd (the driver domain's \
             stack), g<i> (guest i's eth0) or vif<i> (guest i's bridge port)"
        ))
    }
}

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Port::Pnic => write!(f, "pnic"),
            Port::Dd => write!(f, "dd"),
            Port::Guest(i) => write!(f, "g{i}"),
            Port::Vif(i) => write!(f, "vif{i}"),
        }
    }
}

/// What `pvnet capture` was asked.
pub struct CaptureOpts {
    pub id: Option<String>,
    pub port: Port,
    /// The pcap file (None: standard output).
    pub write: Option<PathBuf>,
    /// Stop after this many packets.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// Where packets come from.
enum Source {
    /// An `AF_PACKET` socket bound to one interface.
    Packet(OwnedFd),
    /// The reader's end of a data-path capture.
    DataPath(OwnedFd),
}

/// One packet read: Unix time, original length, the bytes kept.
struct Got {
    ts: Duration,
    orig_len: u32,
    len: usize,
}

impl Source {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Source::Packet(f) | Source::DataPath(f) => f.as_fd(),
        }
    }

    /// Reads one packet into `buf` without blocking (its bytes at the start of `buf`), adding
    /// the records the daemon reports dropped to `dropped`.
    fn read(&self, buf: &mut [u8], dropped: &mut u64) -> Result<Read> {
        match self {
            Source::Packet(fd) => read_packet(fd.as_fd(), buf),
            Source::DataPath(fd) => {
                match read_record(fd.as_fd(), buf, MsgFlags::MSG_DONTWAIT) {
                    Ok(Some((h, data))) => {
                        *dropped += u64::from(h.dropped_before);
                        let len = data.len();
                        // Move the bytes to the front (the header came first).
                        let start = pvnet_dd::capture::RECORD_HDR_LEN;
                        buf.copy_within(start..start + len, 0);
                        Ok(Read::Packet(Got {
                            ts: Duration::from_nanos(h.ts_ns),
                            orig_len: h.orig_len,
                            len,
                        }))
                    }
                    Ok(None) => Ok(Read::End(
                        "the daemon closed the capture (the run went down)",
                    )),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
                    Err(e) => Err(e).context("reading the daemon's capture records"),
                }
            }
        }
    }

    /// Packets the kernel dropped for want of room in the socket (`AF_PACKET` only).
    fn kernel_drops(&self) -> u64 {
        match self {
            Source::Packet(fd) => packet_drops(fd.as_fd()),
            Source::DataPath(_) => 0,
        }
    }
}

enum Read {
    Packet(Got),
    Nothing,
    End(&'static str),
}

fn read_packet(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Read> {
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let r = recvmsg::<()>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_TRUNC,
    );
    let m = match r {
        Ok(m) => m,
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(Read::Nothing),
        Err(Errno::ENETDOWN | Errno::ENODEV | Errno::ENXIO) => {
            return Ok(Read::End("the interface went away (the run went down)"))
        }
        Err(e) => return Err(e).context("reading the capture socket"),
    };
    // With MSG_TRUNC a packet socket returns the packet's real length.
    let orig = m.bytes;
    let mut ts = None;
    for c in m.cmsgs().into_iter().flatten() {
        if let ControlMessageOwned::ScmTimestampns(t) = c {
            ts = Some(Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32));
        }
    }
    let ts = ts.unwrap_or_else(unix_now);
    Ok(Read::Packet(Got {
        ts,
        orig_len: orig.min(u32::MAX as usize) as u32,
        len: orig.min(SNAPLEN),
    }))
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Opens an `AF_PACKET` socket on interface `ifname` of namespace `ns`, bound to it from the
/// start (no packet of another interface gets in), with kernel timestamps.
fn packet_socket(ns: &str, ifname: &str) -> Result<OwnedFd> {
    let netns = pvnet_testbed::Netns::open(ns)?;
    netns.run(|| -> Result<OwnedFd> {
        let ifindex = pvnet_testbed::link::ifindex(ifname)
            .with_context(|| format!("no interface {ifname} in namespace {ns}"))?;
        // Protocol 0 until bound: such a socket receives nothing, so nothing from other
        // interfaces slips in before the bind (packet(7)).
        // SAFETY: socket(2) takes no pointers; the descriptor it returns is owned at once.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error()).context("socket(AF_PACKET)");
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: the address points to a live sockaddr_ll of the length passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error()).context(format!("binding to {ifname}"));
        }
        if socket::setsockopt(&fd, socket::sockopt::RcvBufForce, &PACKET_RCVBUF).is_err() {
            let _ = socket::setsockopt(&fd, socket::sockopt::RcvBuf, &PACKET_RCVBUF);
        }
        socket::setsockopt(&fd, socket::sockopt::ReceiveTimestampns, &true)
            .context("SO_TIMESTAMPNS")?;
        Ok(fd)
    })?
}

/// The kernel's count of packets it dropped for the socket since the last call.
fn packet_drops(fd: BorrowedFd<'_>) -> u64 {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live `st`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        u64::from(st.tp_drops)
    } else {
        0
    }
}

/// Opens the source for `port` of run `id`.
fn open(id: &str, info: &RunInfo, port: Port) -> Result<Source> {
    let guests = info.guest_ns.len();
    let no_guest = |i: usize, what: &str| {
        anyhow!(
            "no {what}{i}: run {id} has {guests} guest{}{}",
            if guests == 1 { "" } else { "s" },
            match guests {
                0 => String::new(),
                1 => format!(" ({what}0)"),
                n => format!(" ({what}0..{what}{})", n - 1),
            }
        )
    };
    match port {
        Port::Pnic => Ok(Source::Packet(packet_socket(&info.dd_ns, &info.pnic_if)?)),
        Port::Dd => {
            if info.mode == "linux" {
                bail!("run {id} has no driver domain (mode linux), so no dd port: capture pnic");
            }
            Ok(Source::Packet(packet_socket(&info.dd_ns, DD_TAP)?))
        }
        Port::Guest(i) => {
            let ns = info.guest_ns.get(i).ok_or_else(|| no_guest(i, "g"))?;
            Ok(Source::Packet(packet_socket(ns, GUEST_IF)?))
        }
        Port::Vif(i) => {
            if i >= guests && info.mode != "linux" {
                return Err(no_guest(i, "vif"));
            }
            match admin::call_with_fds(id, &AdminRequest::Capture { guest: i })? {
                (AdminReply::Capture { .. }, mut fds) if fds.len() == 1 => {
                    Ok(Source::DataPath(fds.remove(0)))
                }
                (AdminReply::Error(e), _) => bail!("{e}"),
                (other, _) => bail!("the daemon answered a capture request with {other:?}"),
            }
        }
    }
}

/// The longest the capture sleeps waiting for a packet or a signal (it checks its run and its
/// deadline in between).
const POLL_WAIT: Duration = Duration::from_millis(200);

/// `pvnet capture`.
pub fn run(opts: CaptureOpts) -> Result<()> {
    let id = rundir::pick_run(opts.id.as_deref())?;
    let info = rundir::read_info(&id).with_context(|| format!("run {id} is not up (yet)"))?;
    if !rundir::pid_alive(info.pid) {
        bail!("run {id} is not up: its daemon (pid {}) is gone", info.pid);
    }
    if opts.write.is_none() && io::stdout().is_terminal() {
        bail!("refusing to write a pcap to a terminal: give -w FILE, or pipe it (| tcpdump -r -)");
    }
    let sig = crate::daemon::signal_fd()?;
    // The port is opened before the file is created: a capture refused at its port leaves a
    // file of that name as it was.
    let src = open(&id, &info, opts.port)?;
    let out: Box<dyn Write> = match &opts.write {
        Some(p) => Box::new(File::create(p).with_context(|| format!("creating {}", p.display()))?),
        None => Box::new(io::stdout()),
    };
    let header = PcapHeader {
        snaplen: SNAPLEN as u32,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let mut out = Out(Rc::new(RefCell::new(BufWriter::with_capacity(
        1 << 20,
        out,
    ))));
    let mut pcap =
        PcapWriter::with_header(out.clone(), header).context("writing the pcap header")?;
    let to = opts.write.as_ref().map_or_else(
        || "standard output".to_string(),
        |p| p.display().to_string(),
    );
    eprintln!(
        "pvnet: capturing {} of run {id} to {to} (Ctrl-C stops)",
        opts.port
    );
    let start = Instant::now();
    let mut buf = vec![0u8; MAX_RECORD];
    let (mut n, mut dropped) = (0u64, 0u64);
    let limit = opts.count.unwrap_or(u64::MAX);
    let mut why = "interrupted";
    let mut last_check = Instant::now();
    // Set when the capture is told to end (Ctrl-C, --duration): what the port saw up to then
    // may still wait in the socket, and is written before the file is closed; a packet
    // stamped later ends the capture unwritten.
    let mut cutoff: Option<Duration> = None;
    'outer: while n < limit {
        if cutoff.is_none() {
            let left = opts.duration.map(|d| d.saturating_sub(start.elapsed()));
            if left == Some(Duration::ZERO) {
                why = "time is up";
                cutoff = Some(unix_now());
            } else {
                let wait = left.map_or(POLL_WAIT, |l| l.min(POLL_WAIT));
                let mut fds = [
                    PollFd::new(src.fd(), PollFlags::POLLIN),
                    PollFd::new(sig.as_fd(), PollFlags::POLLIN),
                ];
                let ms = u16::try_from(wait.as_millis().max(1)).unwrap_or(u16::MAX);
                match poll(&mut fds, PollTimeout::from(ms)) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e).context("poll"),
                }
                if let Ok(Some(_)) = sig.read_signal() {
                    cutoff = Some(unix_now());
                }
            }
        }
        loop {
            match src.read(&mut buf, &mut dropped)? {
                Read::Packet(g) => {
                    if cutoff.is_some_and(|c| g.ts > c) {
                        break 'outer;
                    }
                    let p = PcapPacket::new(g.ts, g.orig_len.max(g.len as u32), &buf[..g.len]);
                    if let Err(e) = pcap.write_packet(&p) {
                        why = "the output went away";
                        eprintln!("pvnet: writing the capture: {e}");
                        break 'outer;
                    }
                    n += 1;
                    if n >= limit {
                        why = "count reached";
                        break 'outer;
                    }
                }
                // Nothing left from before the cutoff: done.
                Read::Nothing if cutoff.is_some() => break 'outer,
                Read::Nothing => break,
                Read::End(w) => {
                    why = w;
                    break 'outer;
                }
            }
        }
        if out.flush().is_err() {
            why = "the output went away";
            break;
        }
        // A capture socket in a namespace keeps it alive: notice a run that went down.
        if last_check.elapsed() >= Duration::from_millis(500) {
            last_check = Instant::now();
            if !rundir::pid_alive(info.pid) {
                why = "the run went down";
                break;
            }
        }
    }
    let flushed = out.flush();
    dropped += src.kernel_drops();
    eprintln!(
        "pvnet: {n} packets captured on {} ({why}), {dropped} dropped",
        opts.port
    );
    match flushed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("writing the capture"),
    }
}

/// The pcap writer's output, shared with the loop so it can flush it (pcap-file's writer
/// gives its inner writer back only by value).
#[derive(Clone)]
struct Out(Rc<RefCell<BufWriter<Box<dyn Write>>>>);

impl Write for Out {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().write(b)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names_parse_and_print_back() {
        for (s, p) in [
            ("pnic", Port::Pnic),
            ("dd", Port::Dd),
            ("g0", Port::Guest(0)),
            ("g12", Port::Guest(12)),
            ("vif3", Port::Vif(3)),
        ] {
            assert_eq!(s.parse::<Port>(), Ok(p));
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "", "g", "vif", "g-1", "vifx", "eth0", "G0", "g1a", "vif+1", "pnic0",
        ] {
            let e = bad.parse::<Port>().unwrap_err();
            assert!(e.contains("unknown port"), "{bad}: {e}");
        }
    }
}
