//! One held aggregate: the segments of one flow merged so far, in the representation of the
//! port's [`Mode`], and the header fix-ups that turn it into a GSO packet when it leaves.
//!
//! An aggregate of one segment is just the received frame, untouched: it leaves exactly as it
//! came. The representation is built when the second segment merges (the LRO paper's Fig. 2(a) for
//! skb-mode; page-mode keeps only headers in the head).

use std::ops::Range;

use pvnet_wire::checksum;
use pvnet_wire::flow::TcpMeta;
use pvnet_wire::vnet::{self, VirtioNetHdr};
use pvnet_wire::{ipv6, TcpFlags};

use super::{Mode, MAX_SEGS};
use crate::packet::{Buf, Chain, Frag, Packet};

/// Largest IP packet of an aggregate, from the first byte of the IP header to the last of the
/// payload (IPv4 options or IPv6 extension headers included). Linux `skb_gro_receive` refuses a
/// merge when `p->len + len >= gro_max_size` (`p->len` the held IP packet, `len` the new
/// payload; `gro_max_size` and `gro_ipv4_max_size` default to `GRO_LEGACY_MAX_SIZE`, 65536),
/// so the largest aggregate is 65535 bytes of IP packet, for IPv6 too (a payload length of
/// 65495 without extension headers).
pub const MAX_IP_PACKET: usize = 65535;
/// Offset of the TCP checksum in the TCP header (`csum_offset`).
const TCP_CSUM_OFF: usize = 16;

#[derive(Debug)]
pub struct Agg {
    /// One segment: the frame as received. More: Skb the first frame (trimmed), Page a copy of
    /// the headers. Either way the headers sit at the offsets below.
    head: Buf,
    frags: Vec<Frag>,
    /// The first frame's receive metadata.
    vnet: VirtioNetHdr,
    /// The first frame's TCP checksum was verified here.
    sw_checked: bool,
    v6: bool,
    l3_off: usize,
    l4_off: usize,
    payload_off: usize,
    /// End of the first segment's IP packet.
    first_end: usize,
    options: Range<usize>,
    /// The IPv6 extension headers (empty for IPv4 or none).
    ip6_ext: Range<usize>,
    pub flow_label: u32,
    /// Segment size: the first segment's payload length.
    pub mss: usize,
    pub segs: u32,
    /// Length of the aggregate's IP packet (headers included).
    ip_len: usize,
    pub next_seq: u32,
    pub ack: u32,
    pub ttl: u8,
    pub tos: u8,
    pub df: bool,
    ip_id: u16,
    /// IPv4 ID step between segments, known from the second segment on (1, or 0 with DF).
    id_step: Option<u16>,
    pub window: u16,
    psh: bool,
    fin: bool,
    /// When the first segment arrived (ticks).
    pub first_at: u64,
    /// When the caller read the first segment ([`super::Lro::set_wall`]; `first_at` without one).
    pub first_seen: u64,
    /// Adaptive policy: leave when the flow's next segment has not come by then.
    pub deadline: Option<u64>,
    /// Adaptive policy: a segment merged since the last hold at the end of a poll.
    pub grew: bool,
}

impl Agg {
    /// An aggregate of the one segment `frame` (parsed as `m`).
    pub fn start(frame: Buf, vnet: VirtioNetHdr, m: &TcpMeta, sw: bool, now: u64) -> Agg {
        Agg {
            head: frame,
            frags: Vec::new(),
            vnet,
            sw_checked: sw,
            v6: m.is_ipv6(),
            l3_off: m.l3_off,
            l4_off: m.l4_off,
            payload_off: m.payload_off,
            first_end: m.l3_end(),
            options: m.tcp_options.clone(),
            ip6_ext: m.ip6_ext.clone(),
            flow_label: m.flow_label,
            mss: m.payload_len,
            segs: 1,
            ip_len: m.ip_packet_len(),
            next_seq: m.seq.wrapping_add(m.payload_len as u32),
            ack: m.ack,
            ttl: m.ttl,
            tos: m.tos,
            df: m.df,
            ip_id: m.ip_ident,
            id_step: None,
            window: m.window,
            psh: m.flags.contains(TcpFlags::PSH),
            fin: m.flags.contains(TcpFlags::FIN),
            first_at: now,
            first_seen: now,
            deadline: None,
            grew: false,
        }
    }

    pub fn macs(&self) -> &[u8] {
        &self.head[..12]
    }

    pub fn options(&self) -> &[u8] {
        &self.head[self.options.clone()]
    }

    pub fn ip6_ext(&self) -> &[u8] {
        &self.head[self.ip6_ext.clone()]
    }

    /// Bytes 12 and 13 of the first segment's TCP header: data offset, the reserved bits (AE
    /// included) and the flags.
    pub fn tcp_word(&self) -> [u8; 2] {
        [self.head[self.l4_off + 12], self.head[self.l4_off + 13]]
    }

    /// `ip_id` follows the previous segment's: +1, or (DF set) the same value, the choice made
    /// by the second segment and kept (`inet_gro_receive`'s `flush_id`). IPv6 has no ID.
    pub fn ip_id_continues(&self, id: u16, df: bool) -> bool {
        if self.v6 {
            return true;
        }
        match self.id_step {
            Some(step) => id == self.ip_id.wrapping_add(step),
            None => id == self.ip_id.wrapping_add(1) || (df && id == self.ip_id),
        }
    }

    /// `payload` more bytes keep the IP packet within [`MAX_IP_PACKET`] and the segment count
    /// within [`MAX_SEGS`].
    pub fn fits(&self, payload: usize) -> bool {
        self.ip_len + payload <= MAX_IP_PACKET && (self.segs as usize) < MAX_SEGS
    }

    /// Room for one more full segment.
    pub fn has_room(&self) -> bool {
        self.fits(self.mss)
    }

    /// Appends `frame` (parsed as `m`, all match rules passed). No payload byte is copied.
    pub fn merge(&mut self, mut frame: Buf, m: &TcpMeta, mode: Mode) {
        if self.segs == 1 {
            self.build(mode);
        }
        if !self.v6 {
            self.id_step
                .get_or_insert(m.ip_ident.wrapping_sub(self.ip_id));
            self.ip_id = m.ip_ident;
        }
        frame.truncate(m.l3_end());
        self.frags.push(Frag {
            buf: frame,
            start: m.payload_off,
        });
        self.segs += 1;
        self.ip_len += m.payload_len;
        self.next_seq = m.seq.wrapping_add(m.payload_len as u32);
        self.psh |= m.flags.contains(TcpFlags::PSH);
        self.fin |= m.flags.contains(TcpFlags::FIN);
    }

    /// Moves leased buffers to the heap; returns how many it copied.
    pub fn detach(&mut self) -> usize {
        crate::packet::detach_all(&mut self.head, &mut self.frags)
    }

    /// Moves the newest segment's buffer to the heap if it is leased; returns whether it did.
    pub fn detach_newest(&mut self) -> bool {
        crate::packet::detach_newest(&mut self.head, &mut self.frags)
    }

    /// Turns the lone first frame into the mode's representation.
    fn build(&mut self, mode: Mode) {
        // Enough fragment slots for a full aggregate: one allocation per aggregate.
        let cap = (MAX_IP_PACKET / self.mss.max(1)).clamp(2, MAX_SEGS);
        self.frags = Vec::with_capacity(cap);
        self.head.truncate(self.first_end);
        if mode == Mode::Page {
            let headers = Buf::from(&self.head[..self.payload_off]);
            let first = std::mem::replace(&mut self.head, headers);
            self.frags.push(Frag {
                buf: first,
                start: self.payload_off,
            });
        }
    }

    /// The packet that leaves: the original frame for one segment, a GSO packet otherwise.
    pub fn finish(self, mode: Mode) -> Packet {
        if self.segs == 1 {
            let mut vnet = self.vnet;
            if self.sw_checked && !vnet.needs_csum() {
                vnet.flags |= vnet::F_DATA_VALID;
            }
            return Packet::linear(vnet, self.head);
        }
        let mut head = self.head;
        let (l3, l4) = (self.l3_off, self.l4_off);
        // The IP lengths and the TCP length cover the extension headers / options as they are.
        let tcp_len = self.ip_len - (l4 - l3);
        let pseudo = if self.v6 {
            let payload_len = (self.ip_len - ipv6::HEADER_LEN) as u16;
            head[l3 + 4..l3 + 6].copy_from_slice(&payload_len.to_be_bytes());
            let src: [u8; 16] = head[l3 + 8..l3 + 24].try_into().expect("16 bytes");
            let dst: [u8; 16] = head[l3 + 24..l3 + 40].try_into().expect("16 bytes");
            checksum::pseudo_header_v6(src.into(), dst.into(), 6, tcp_len as u32)
        } else {
            head[l3 + 2..l3 + 4].copy_from_slice(&(self.ip_len as u16).to_be_bytes());
            head[l3 + 10..l3 + 12].fill(0);
            let c = checksum::checksum(&head[l3..l4]);
            head[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            let src: [u8; 4] = head[l3 + 12..l3 + 16].try_into().expect("4 bytes");
            let dst: [u8; 4] = head[l3 + 16..l3 + 20].try_into().expect("4 bytes");
            checksum::pseudo_header_v4(src.into(), dst.into(), 6, tcp_len as u32)
        };
        // `tcp_gro_receive` ORs FIN and PSH of the merged segments into the head; every other
        // flag, the window included, is the same in all of them.
        if self.psh {
            head[l4 + 13] |= TcpFlags::PSH.bits();
        }
        if self.fin {
            head[l4 + 13] |= TcpFlags::FIN.bits();
        }
        // CHECKSUM_PARTIAL: the folded, non-complemented pseudo-header sum (PITFALLS).
        let seed = checksum::fold(pseudo);
        head[l4 + TCP_CSUM_OFF..l4 + TCP_CSUM_OFF + 2].copy_from_slice(&seed.to_be_bytes());
        Packet {
            vnet: VirtioNetHdr {
                flags: vnet::F_NEEDS_CSUM,
                gso_type: if self.v6 {
                    vnet::GSO_TCPV6
                } else {
                    vnet::GSO_TCPV4
                },
                hdr_len: self.payload_off as u16,
                gso_size: self.mss as u16,
                csum_start: l4 as u16,
                csum_offset: TCP_CSUM_OFF as u16,
            },
            head,
            frags: self.frags,
            chain: match mode {
                Mode::Skb => Chain::FragList,
                Mode::Page => Chain::PageFrags,
            },
        }
    }
}
