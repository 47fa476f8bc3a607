//! Guest to guest in one copy: a frame one guest sends to another guest on the same driver
//! domain goes from the sender's granted TX pages straight into the receiver's granted RX
//! buffers with `GNTTABOP_copy` ops whose source *and* destination are grant references
//! ([`Hypervisor::copy_grant_to_grant`]), instead of being copied out of the sender into a
//! driver-domain buffer, queued, and copied again into the receiver (HP Labs, Xen Summit 2006:
//! "copy guest to guest once").
//!
//! # Contract
//!
//! - Only the headers stop in the driver domain: the first [`G2G_HEAD_LEN`] bytes (Linux
//!   netback's `XEN_NETBACK_TX_COPY_LEN`) are grant-copied out of the sender once, validated
//!   (checksum offsets, the switch's decision), and it is that validated copy the receiver
//!   gets, so a sender that rewrites its page after the check cannot change what was routed
//!   (its MACs, its L3/L4 fields). The payload after the headers is never looked at by the
//!   driver domain and crosses once, grant to grant.
//! - Both sides are validated by the hypervisor op by op, as a one-sided copy is: the source
//!   must be granted to the driver domain by the sender, the destination granted writable by
//!   the receiver, each range inside its page. A failure on the source side is the sender's
//!   protocol violation (its vif fails with [`Fatal::TxBadGref`] / [`Fatal::TxCopyFailed`]);
//!   the receiver's requests already taken are answered with `NETIF_RSP_ERROR` (Linux
//!   netback answers a failed RX copy the same way) and counted (`rx_peer_copy_failed`). A
//!   failure on the destination side is the receiver's ([`Fatal::RxBadGref`] /
//!   [`Fatal::RxCopyFailed`]); the sender's slots are answered `OKAY` (the frame was lost
//!   past the switch, as a frame dropped at a full queue is).
//! - The direct path is taken only when nothing else would see the frame and nothing would
//!   overtake it: the receiver runs `copy`, its queue of waiting packets is empty, it has
//!   posted enough RX requests now, and it advertised the features the packet needs (`sg`,
//!   the GSO type). Everything else is [`Refusal`]: the sender's netback then copies the rest
//!   of the packet out and the data path carries it on with the decision the switch already
//!   made (the switch sees each frame once). The data path also keeps the direct path off
//!   while a capture runs and for flooded frames (see [`crate::datapath`]).
//! - Responses: the sender's slots are answered as soon as the copy is done (no deferred
//!   completion: the copy is synchronous); the receiver's responses are written at once and
//!   pushed (and notified) by the receiver's next flush, once per poll.

use pvnet_hv::grant::CopyGrantToGrant;

use super::*;

/// Bytes of a guest-to-guest frame the driver domain copies out of the sender to route and
/// validate it (Linux netback's `XEN_NETBACK_TX_COPY_LEN`). Headers longer than this
/// (options) send the frame down the whole-copy path.
pub const G2G_HEAD_LEN: usize = TX_COPY_LEN;

const _: () = assert!(G2G_HEAD_LEN <= PAGE_SIZE);

/// A TX frame whose headers the driver domain holds, the rest still in the sender's pages.
pub struct TxHead<'a> {
    /// The sender.
    pub domid: DomId,
    /// The frame's first `min(len, G2G_HEAD_LEN)` bytes, copied out of the sender and
    /// validated.
    pub head: &'a [u8],
    /// The whole frame's length.
    pub len: usize,
    /// The header the frame's flags and headers give it.
    pub vnet: VirtioNetHdr,
    /// The frame in the sender's pages: (grant, offset in its page, offset in the frame,
    /// length), in order; offsets and lengths already checked against the page.
    segs: &'a [(u32, u16, usize, usize)],
}

/// What the owner of the data path did with a frame offered by
/// [`Netback::tx_poll_direct`].
pub enum Direct<T> {
    /// Delivered, or lost past the switch: the sender's slots are answered `OKAY`.
    Done,
    /// The sender's grants failed the copy (source side): the sender broke the protocol.
    SourceFailed(GntStatus),
    /// Not taken: netback copies the rest of the frame out and hands it on with `T`.
    Copy(T),
}

/// Why the receiver did not take a frame directly (the frame goes the whole-copy way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The receiver's vif has failed.
    Down,
    /// The receiver does not run `copy`.
    Mechanism,
    /// Packets are waiting in the receiver's queue (the frame must not overtake them).
    Queued,
    /// The receiver lacks a feature the frame needs (`sg`, its GSO type), or the length is
    /// one it could never take: the whole-copy path segments or drops it, counted.
    Features,
    /// Not enough RX requests posted now.
    NoBuffers,
}

/// What [`Netback::rx_direct`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxDirect {
    Delivered,
    /// A source-side failure (the sender's fault); the receiver's requests were answered
    /// with errors.
    SourceFailed(GntStatus),
    /// A destination-side failure: the receiver's vif has failed ([`Netback::fatal`]).
    DestFailed,
    Refused(Refusal),
}

impl Netback {
    /// [`Netback::tx_poll`] for a frontend whose frames may go straight to another guest:
    /// every valid frame's headers are offered to `direct` first ([`TxHead`]); a frame it
    /// does not take ([`Direct::Copy`]) is copied out whole and handed to `deliver` with
    /// what `direct` returned. Frames whose headers cannot be parsed within
    /// [`G2G_HEAD_LEN`] bytes are not offered (`tx_head_unparsed`) and reach `deliver` with
    /// `T::default()`. Runs [`Netback::tx_poll`] for a vif that does not run `copy`.
    pub fn tx_poll_direct<T: Default>(
        &mut self,
        budget: usize,
        mut direct: impl FnMut(&TxHead<'_>) -> Direct<T>,
        mut deliver: impl FnMut(Packet, T),
    ) -> Result<usize, Fatal> {
        if self.mechanism != Mechanism::Copy {
            return self.tx_poll(budget, |p| deliver(p, T::default()));
        }
        self.tx_poll_with(budget, |nb| {
            if let Some((p, t)) = nb.tx_finish_direct(&mut direct)? {
                deliver(p, t);
            }
            Ok(())
        })
    }

    /// [`Netback::tx_finish`] with the headers offered to `direct` first.
    fn tx_finish_direct<T: Default>(
        &mut self,
        direct: &mut impl FnMut(&TxHead<'_>) -> Direct<T>,
    ) -> Result<Option<(Packet, T)>, Fatal> {
        let c = self.tx_check()?;
        if c.status != NETIF_RSP_OKAY {
            self.tx_answer(c.first.id, c.status);
            return Ok(None);
        }
        let segs = self.tx_segs(&c);
        let hl = c.total.min(G2G_HEAD_LEN);
        let mut head = [0u8; G2G_HEAD_LEN];
        self.tx_copy_range(&segs, 0, &mut head[..hl])?;
        let blank = c.first.flags & NETTXF_CSUM_BLANK != 0;
        let valid = c.first.flags & NETTXF_DATA_VALIDATED != 0;
        let vnet = vnet_hdr_for(&head[..hl], blank, valid, c.gso);
        let mut t = T::default();
        match vnet {
            Some(v) => {
                let h = TxHead {
                    domid: self.domid,
                    head: &head[..hl],
                    len: c.total,
                    vnet: v,
                    segs: &segs,
                };
                match direct(&h) {
                    Direct::Done => {
                        self.tx_answer(c.first.id, NETIF_RSP_OKAY);
                        self.tx_count(c.total, c.gso.is_some());
                        self.stats.tx_direct_packets += 1;
                        return Ok(None);
                    }
                    Direct::SourceFailed(st) => {
                        let f = if st == GntStatus::BadGntref {
                            Fatal::TxBadGref
                        } else {
                            Fatal::TxCopyFailed
                        };
                        return Err(self.fail(f));
                    }
                    Direct::Copy(x) => t = x,
                }
            }
            None if hl < c.total => self.stats.tx_head_unparsed += 1,
            None => {}
        }
        // The whole-copy path: the headers already copied (and validated) stay, the rest
        // follows.
        let mut data = vec![0u8; c.total];
        data[..hl].copy_from_slice(&head[..hl]);
        if hl < c.total {
            self.tx_copy_range(&segs, hl, &mut data[hl..])?;
        }
        let vnet = vnet.or_else(|| vnet_hdr_for(&data, blank, valid, c.gso));
        let Some(v) = vnet else {
            self.stats.tx_bad_csum += 1;
            self.tx_answer(c.first.id, NETIF_RSP_ERROR);
            return Ok(None);
        };
        self.tx_answer(c.first.id, NETIF_RSP_OKAY);
        self.tx_count(c.total, c.gso.is_some());
        Ok(Some((Packet::linear(v, data), t)))
    }

    /// Takes the frame `h` straight from the sender's grants into this guest's posted RX
    /// buffers, if this vif can take it now without reordering (see the module docs): the
    /// headers from the driver domain's validated copy, the rest grant to grant. Responses
    /// are written, not pushed (the next [`Netback::rx_flush`] pushes them).
    pub fn rx_direct(&mut self, h: &TxHead<'_>) -> RxDirect {
        if self.fatal.is_some() {
            return RxDirect::Refused(Refusal::Down);
        }
        if self.mechanism != Mechanism::Copy {
            return RxDirect::Refused(Refusal::Mechanism);
        }
        if !self.rxq.is_empty() {
            return RxDirect::Refused(Refusal::Queued);
        }
        let len = h.len;
        let gso = h.vnet.gso_kind();
        let supported = match gso {
            vnet::GSO_NONE => true,
            vnet::GSO_TCPV4 => self.features.gso_tcpv4,
            vnet::GSO_TCPV6 => self.features.gso_tcpv6,
            _ => false,
        };
        if !supported || (len > PAGE_SIZE && !self.features.sg) || !(14..=MAX_PACKET).contains(&len)
        {
            return RxDirect::Refused(Refusal::Features);
        }
        let has_extra = gso != vnet::GSO_NONE;
        let need = len.div_ceil(PAGE_SIZE) + usize::from(has_extra);
        match self.rx.unconsumed_requests() {
            Ok(n) if n as usize >= need => {}
            // A ring overflow is found (and made fatal) by the next flush.
            _ => return RxDirect::Refused(Refusal::NoBuffers),
        }
        self.rx_reqs.clear();
        for _ in 0..need {
            let r = self.rx.take_request();
            self.rx_reqs.push(r);
        }
        // Data slot k's request: ring order is data0, the extra, data1, ...
        let reqs = &self.rx_reqs;
        let slot_gref = |k: usize| GrantRef(reqs[k + usize::from(has_extra && k > 0)].gref);
        let hl = h.head.len();
        let mut head_op = [CopyToGuest {
            src: h.head,
            gref: slot_gref(0),
            offset: 0,
            status: GntStatus::Okay,
        }];
        let mut ops: Vec<CopyGrantToGrant> = Vec::with_capacity(h.segs.len() + need);
        for &(gref, off, start, slen) in h.segs {
            let (mut at, end) = (start.max(hl), start + slen);
            while at < end {
                let page_off = at % PAGE_SIZE;
                let n = (end - at).min(PAGE_SIZE - page_off);
                ops.push(CopyGrantToGrant::new(
                    GrantRef(gref),
                    off + (at - start) as u16,
                    slot_gref(at / PAGE_SIZE),
                    page_off as u16,
                    n as u16,
                ));
                at += n;
            }
        }
        self.hv
            .copy_to_guest(DomId::DRIVER, self.domid, &mut head_op);
        self.stats.rx_copy_batches += 1;
        self.stats.rx_copy_ops += 1;
        if head_op[0].status != GntStatus::Okay {
            self.fail(rx_fatal(head_op[0].status));
            return RxDirect::DestFailed;
        }
        if !ops.is_empty() {
            self.hv
                .copy_grant_to_grant(DomId::DRIVER, h.domid, self.domid, &mut ops);
            self.stats.rx_copy_batches += 1;
            self.stats.rx_copy_ops += ops.len() as u64;
            let src_bad = ops.iter().find(|o| o.src_status != GntStatus::Okay);
            let dst_bad = ops
                .iter()
                .find(|o| o.src_status == GntStatus::Okay && o.dst_status != GntStatus::Okay);
            if let Some(d) = dst_bad {
                self.fail(rx_fatal(d.dst_status));
            }
            if let Some(s) = src_bad {
                if self.fatal.is_none() {
                    self.rx_respond(0, len, &h.vnet, NETIF_RSP_ERROR);
                    self.stats.rx_peer_copy_failed += 1;
                }
                return RxDirect::SourceFailed(s.src_status);
            }
            if dst_bad.is_some() {
                return RxDirect::DestFailed;
            }
        }
        self.rx_respond(0, len, &h.vnet, NETIF_RSP_OKAY);
        self.stats.rx_direct_packets += 1;
        RxDirect::Delivered
    }
}

/// The receiver's fatal reason for a destination-side copy status.
fn rx_fatal(st: GntStatus) -> Fatal {
    if st == GntStatus::BadGntref {
        Fatal::RxBadGref
    } else {
        Fatal::RxCopyFailed
    }
}

impl<'a> TxHead<'a> {
    /// Bytes that cross grant to grant (the frame after its headers).
    pub fn payload_len(&self) -> usize {
        self.len - self.head.len()
    }
}
