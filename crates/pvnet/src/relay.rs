//! The `relay` mode: the floor of this emulation.
//!
//! Every PV configuration crosses the same two kernel interfaces this design is built on: the
//! physical port's packet ring (the kernel copies each frame into it) and a TAP into the
//! guest's namespace (the kernel copies each packet out of user memory and runs its receive
//! path from the write). The relay keeps those two and nothing of Xen: the daemon writes what
//! the bridge hands a guest's port straight into that guest's TAP, in one `io_uring_enter` per
//! poll as netfront does, and reads the guest's TAP straight back to the bridge. No guest
//! memory, grants, rings, event channels or guest process. What it costs per byte is what
//! any implementation of this design pays before doing Xen's work, so `xen` against `relay`
//! is the cost of the Xen machinery, and `relay` against `linux` the cost of the interfaces.

use std::io::{self, IoSliceMut};

use anyhow::{Context, Result};
use pvnet_dd::datapath::TapPort;
use pvnet_dd::packet::Packet;
use pvnet_guest::netfront::RxPacket;
use pvnet_guest::tapbatch::TapBatch;
use pvnet_testbed::{link, topology, Netns, Tap};
use serde::Serialize;

/// What a relayed guest's port did, as `pvnet stat` shows it (under `relay`), beside the
/// frames read from it, which the data path counts (`from_guest`, `from_guest_errors`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RelayStats {
    /// Packets written into the guest's TAP, their bytes, and writes the TAP refused.
    pub to_guest: u64,
    pub to_guest_bytes: u64,
    pub to_guest_errors: u64,
    /// `io_uring_enter` calls that wrote a batch of packets, and the packets in them.
    pub batches: u64,
    pub batched_packets: u64,
}

/// One guest's TAP, served by the daemon itself.
pub struct RelayTap {
    pub mac: [u8; 6],
    batch: TapBatch<Tap>,
    /// Packets for the guest since the last flush, in order.
    queue: Vec<Packet>,
    /// Reused per flush: every piece of the queued packets, and each packet's span of them.
    pieces_at: Vec<(usize, usize)>,
    ok: Vec<bool>,
    pub stats: RelayStats,
}

impl RelayTap {
    /// Creates guest `i`'s interface `eth0` in its namespace `ns`, as its netfront would: the
    /// guest's MAC, address and MTU, up.
    pub fn create(ns: &Netns, i: usize, mtu: u32) -> Result<RelayTap> {
        let mac = topology::guest_mac(i);
        let tap = ns
            .run(|| -> Result<Tap> {
                let tap = Tap::open("eth0", true)?;
                link::set_mtu(tap.name(), mtu)?;
                link::set_mac(tap.name(), mac)?;
                link::add_ipv4(tap.name(), topology::guest_addr(i), topology::SUBNET_PREFIX)?;
                link::set_up(tap.name(), true)?;
                Ok(tap)
            })?
            .with_context(|| format!("creating guest {i}'s TAP in {}", ns.name()))?;
        let batch = TapBatch::new(tap);
        if let Some(why) = &batch.fallback {
            eprintln!("pvnet relay: one writev per packet into the TAP ({why})");
        }
        Ok(RelayTap {
            mac,
            batch,
            queue: Vec::new(),
            pieces_at: Vec::new(),
            ok: Vec::new(),
            stats: RelayStats::default(),
        })
    }

    pub fn tap(&self) -> &Tap {
        self.batch.tap()
    }
}

impl TapPort for RelayTap {
    /// Queues a packet for the guest (written at the next [`TapPort::flush`]).
    fn push(&mut self, pkt: Packet) -> io::Result<()> {
        self.queue.push(pkt);
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.batch.tap().readv(&mut [IoSliceMut::new(buf)])
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::to_value(&self.stats).unwrap_or_default()
    }

    /// Writes the queued packets into the TAP, in order, and lets them go (their ring slots
    /// go back to the kernel).
    fn flush(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let mut pieces: Vec<&[u8]> = Vec::new();
        self.pieces_at.clear();
        for p in &self.queue {
            let first = pieces.len();
            pieces.extend(p.pieces());
            self.pieces_at.push((first, pieces.len()));
        }
        let pkts: Vec<RxPacket<'_>> = (self.queue.iter())
            .zip(&self.pieces_at)
            .map(|(p, &(a, b))| RxPacket {
                hdr: p.vnet,
                pieces: &pieces[a..b],
            })
            .collect();
        self.ok.clear();
        self.ok.resize(pkts.len(), false);
        let (batches, batched) = (self.batch.batches, self.batch.batched_packets);
        self.batch.write(&pkts, &mut self.ok);
        for (p, ok) in pkts.iter().zip(&self.ok) {
            if *ok {
                self.stats.to_guest += 1;
                self.stats.to_guest_bytes += p.pieces.iter().map(|s| s.len() as u64).sum::<u64>();
            } else {
                self.stats.to_guest_errors += 1;
            }
        }
        self.stats.batches += self.batch.batches - batches;
        self.stats.batched_packets += self.batch.batched_packets - batched;
        drop(pkts);
        drop(pieces);
        self.queue.clear();
    }
}
