//! What the ring-path tests share: a netfront and a netback side by side, frames to send,
//! a deterministic generator, and the TAP's view of a frame.
#![allow(dead_code)]

use std::io::{self, IoSliceMut};
use std::sync::Arc;

use pvnet_dd::netback::Netback;
use pvnet_guest::netfront::Netfront;
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::DomId;
use pvnet_wire::vnet::{self, VirtioNetHdr};

pub const GUEST: DomId = DomId(1);

pub struct Pair {
    pub hv: Arc<Hypervisor>,
    pub nf: Netfront,
    pub nb: Netback,
}

/// A small deterministic generator (xorshift64*).
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// Ethernet + IPv4 (20 B) + TCP with a 12-byte timestamp option (32 B) + payload: `len` bytes.
pub fn tcp4_frame(len: usize, seed: u32) -> Vec<u8> {
    assert!(len >= 66);
    let mut f = pattern(len, seed);
    f[0..6].copy_from_slice(&[0x00, 0x16, 0x3e, 0, 0, 0x0a]);
    f[6..12].copy_from_slice(&[0x00, 0x16, 0x3e, 0, 0, 0x0b]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14).min(65535) as u16;
    let ip = &mut f[14..34];
    ip.copy_from_slice(&[
        0x45, 0, 0, 0, 0x42, 0x42, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7,
    ]);
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let tcp = &mut f[34..66];
    tcp[0..4].copy_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    tcp[4..8].copy_from_slice(&seed.to_be_bytes());
    tcp[8..12].copy_from_slice(&[0, 0, 0, 1]);
    tcp[12] = 8 << 4;
    tcp[13] = 0x18;
    tcp[14..20].copy_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
    tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0x30, 0x39, 0xde, 0xad, 0xbe, 0xef]);
    f
}

/// A frame of an experimental ethertype: no headers for csum_setup to find.
pub fn raw_frame(len: usize, seed: u32) -> Vec<u8> {
    let mut f = pattern(len, seed);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

pub fn needs_csum() -> VirtioNetHdr {
    VirtioNetHdr {
        flags: vnet::F_NEEDS_CSUM,
        csum_start: 34,
        csum_offset: 16,
        hdr_len: 66,
        ..Default::default()
    }
}

pub fn tso(gso_size: u16) -> VirtioNetHdr {
    VirtioNetHdr {
        gso_type: vnet::GSO_TCPV4,
        gso_size,
        ..needs_csum()
    }
}

/// What a TAP readv does: the virtio header, then the frame, scattered over the buffers.
pub fn readv_from(bytes: &[u8], iov: &mut [IoSliceMut<'_>]) -> usize {
    let mut off = 0;
    for v in iov.iter_mut() {
        if off >= bytes.len() {
            break;
        }
        let n = v.len().min(bytes.len() - off);
        v[..n].copy_from_slice(&bytes[off..off + n]);
        off += n;
    }
    off
}

pub fn tap_send(nf: &mut Netfront, hdr: &VirtioNetHdr, frame: &[u8]) -> io::Result<Option<usize>> {
    let mut bytes = hdr.to_bytes().to_vec();
    bytes.extend_from_slice(frame);
    nf.tx_read_with(|iov| {
        assert_eq!(iov[0].len(), 10, "first iovec is the virtio header");
        Ok(readv_from(&bytes, iov))
    })
}
