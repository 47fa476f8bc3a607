//! netback's ring consumer against a hostile frontend (`pvnet_dd::mock::MockFrontend`): the
//! fuzz input writes well-formed TX packets and RX buffers, raw slot bytes, any producer index,
//! any grant reference, raw grant-table entries (any flags, domain, frame), and queues packets
//! for the guest, sets or lifts a transmit rate and moves the clock; `Netback::tx_poll` and
//! `Netback::rx_flush` run in between.
//!
//! Invariants:
//! - nothing panics, whatever the guest wrote;
//! - once netback reports a fatal error it keeps returning that same error, never delivers a
//!   packet, and touches neither ring page, grant copy nor counter again;
//! - netback writes no guest page but the ring pages and pages some grant entry made writable
//!   to it (every other data page reads the same before and after each netback call; the
//!   hypervisor layer is what enforces it);
//! - a delivered TX packet is 14..=`MAX_PACKET` bytes; while the guest only posts well-formed
//!   packets, netback raises no fatal error and delivers exactly the frames posted, in order
//!   (with a rate too: a poll that stops for credit leaves the rest on the ring, whole packets);
//! - a poll that stopped for credit names a time after the clock's, and took no packet beyond
//!   the one that overdrew the window.

#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pvnet_dd::mock::MockFrontend;
use pvnet_dd::netback::credit::TxRate;
use pvnet_dd::netback::{Features, Netback, MAX_PACKET};
use pvnet_dd::packet::Packet;
use pvnet_hv::grant::{GTF_PERMIT_ACCESS, GTF_READONLY};
use pvnet_hv::{DomId, GrantRef, PAGE_SIZE};
use pvnet_netif::*;
use pvnet_wire::vnet::{self, VirtioNetHdr};

const DATA_PAGES: u32 = 6;
/// Grants the input may allocate (the table has 512 entries).
const MAX_GRANTS: usize = 300;
/// Data pages a well-formed guest sends from (the rest take RX buffers).
const TX_PAGES: u32 = 3;

struct Fuzz {
    m: MockFrontend,
    nb: Netback,
    /// Frames of data pages some grant entry ever made writable to the driver domain.
    writable: BTreeSet<u32>,
    /// Refs allocated so far (for RX requests and raw rewrites).
    refs: Vec<GrantRef>,
    /// The guest has only done well-formed things so far.
    clean: bool,
    /// Frames posted while clean, not yet delivered.
    posted: std::collections::VecDeque<Vec<u8>>,
    next_page: u32,
    next_id: u16,
    /// Grant refs allocated so far.
    granted: usize,
    fatal: Option<pvnet_dd::netback::Fatal>,
    /// The clock netback's credit reads (ns).
    now: u64,
    /// Scratch for the pages netback may not write, before and after a call.
    snap: Vec<u8>,
    snap_before: Vec<u8>,
}

impl Fuzz {
    /// Copies every data page no grant entry ever made writable into `self.snap` (page by
    /// page, into a buffer kept across calls: this runs twice per netback call).
    fn snapshot_not_writable(&mut self) {
        self.snap.clear();
        for i in 0..DATA_PAGES {
            let pfn = self.m.data_pfn(i);
            if !self.writable.contains(&pfn.0) {
                let at = self.snap.len();
                self.snap.resize(at + PAGE_SIZE, 0);
                self.m
                    .mem
                    .read(pfn, 0, &mut self.snap[at..])
                    .expect("data page");
            }
        }
    }

    /// Runs one netback call and checks what it may and may not have touched.
    fn backend(&mut self, tx: bool, budget: usize) {
        self.snapshot_not_writable();
        std::mem::swap(&mut self.snap, &mut self.snap_before);
        // Only compared once netback has failed: taken only then.
        let rings = self.fatal.map(|_| self.m.ring_pages());
        let stats = self.nb.stats.clone();
        let copies = self.m.hv.stats().copy_ops;
        let mut got = Vec::new();
        let r = if tx {
            self.nb.set_now(self.now);
            let charged = self.nb.stats.tx_credit_charged;
            let r = self.nb.tx_poll(budget, |p| got.push(p.to_vec()));
            if let (Ok(_), Some(at), Some(rate)) = (r, self.nb.tx_credit_wait(), self.nb.tx_rate())
            {
                assert!(at > self.now, "a wait for a window already begun");
                // One window's credit (at most 128 KiB piled up) and the packet that overdrew.
                let most = rate.bytes.max(131_072) + 65_535;
                assert!(
                    self.nb.stats.tx_credit_charged - charged <= most,
                    "took more than its credit"
                );
            }
            r
        } else {
            self.nb.rx_flush()
        };
        // `writable` only grows (netback calls do not change it), so the same pages are read.
        self.snapshot_not_writable();
        assert!(
            self.snap == self.snap_before,
            "netback wrote a page not granted writable"
        );
        if let Some(f) = self.fatal {
            assert_eq!(r, Err(f), "a different answer after the fatal error");
            assert!(got.is_empty(), "delivered after the fatal error");
            assert!(
                Some(self.m.ring_pages()) == rings,
                "a ring page changed after the fatal error"
            );
            assert_eq!(self.nb.stats, stats, "counters moved after the fatal error");
            assert_eq!(
                self.m.hv.stats().copy_ops,
                copies,
                "grant copies after the fatal error"
            );
            return;
        }
        if let Err(f) = r {
            assert_eq!(self.nb.fatal(), Some(f));
            assert!(!self.clean, "fatal {f:?} on a well-formed guest");
            self.fatal = Some(f);
        }
        for p in got {
            assert!(
                (14..=MAX_PACKET).contains(&p.len()),
                "delivered {} bytes",
                p.len()
            );
            if self.clean {
                assert_eq!(
                    self.posted.pop_front().as_ref(),
                    Some(&p),
                    "well-formed frame changed or reordered"
                );
            }
        }
    }

    fn grant(&mut self, page: u32, readonly: bool) -> Option<GrantRef> {
        if self.granted >= MAX_GRANTS {
            return None;
        }
        self.granted += 1;
        let r = self.m.grant(page, readonly);
        if !readonly {
            self.writable.insert(self.m.data_pfn(page).0);
        }
        self.refs.push(r);
        Some(r)
    }

    fn any_ref(&self, u: &mut Unstructured<'_>) -> Result<u32> {
        Ok(if !self.refs.is_empty() && u.ratio(3, 4)? {
            u.choose(&self.refs)?.0
        } else {
            u.arbitrary()?
        })
    }
}

fn step(f: &mut Fuzz, u: &mut Unstructured<'_>) -> Result<()> {
    match u.int_in_range(0..=15u8)? {
        // A well-formed packet of 14..=1514 bytes in one page.
        0 | 1 => {
            let len = u.int_in_range(14..=1514usize)?;
            let seed: u8 = u.arbitrary()?;
            let frame: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            // A well-formed guest reuses a page only once netback has copied the frame out.
            let busy = f.clean && f.posted.len() >= TX_PAGES as usize;
            if busy || f.granted >= MAX_GRANTS || f.m.tx.free_requests() == 0 {
                return Ok(());
            }
            // TX data lives in the first TX_PAGES pages, RX buffers after them, so that a
            // well-formed guest never hands out a page it is still sending from.
            let page = f.next_page % TX_PAGES;
            f.next_page += 1;
            let ids = f.m.post_tx_frame(&frame, 0, None, page, f.next_id);
            f.granted += ids.len();
            f.next_id = f.next_id.wrapping_add(ids.len() as u16);
            if f.clean {
                f.posted.push_back(frame);
            }
            f.m.push_tx();
        }
        // A TX request with fuzz-chosen fields.
        2 => {
            f.clean = false;
            let r = TxRequest {
                gref: f.any_ref(u)?,
                offset: u.arbitrary()?,
                flags: u.arbitrary()?,
                id: u.arbitrary()?,
                size: u.arbitrary()?,
            };
            f.m.put_tx(r);
            if u.arbitrary()? {
                f.m.push_tx();
            }
        }
        3 => {
            f.clean = false;
            let g = GsoInfo {
                size: u.arbitrary()?,
                gso_type: u.int_in_range(0..=3)?,
                features: u.arbitrary()?,
            };
            f.m.put_tx_extra(ExtraInfo::new_gso(g, u.arbitrary()?));
        }
        4 => {
            f.clean = false;
            let at = f.m.tx.req_prod_pvt().plus(u.int_in_range(0..=3)?);
            let b: [u8; 12] = u.arbitrary()?;
            f.m.tx_raw(at, b);
        }
        5 => {
            f.clean = false;
            let base = f.m.tx.req_prod_pvt();
            let v = match u.int_in_range(0..=2u8)? {
                0 => base.plus(u.int_in_range(0..=300)?),
                1 => RingIdx(base.0.wrapping_sub(u.int_in_range(0..=300)?)),
                _ => RingIdx(u.arbitrary()?),
            };
            f.m.set_tx_req_prod(v);
        }
        // RX buffers: granted pages (writable or not), or any ref.
        6 | 7 => {
            let n = u.int_in_range(1..=20u8)?;
            for _ in 0..n {
                let gref = if u.ratio(4, 5)? {
                    let page = if u.ratio(9, 10)? {
                        u.int_in_range(TX_PAGES..=DATA_PAGES - 1)?
                    } else {
                        u.int_in_range(0..=DATA_PAGES - 1)?
                    };
                    let ro = u.ratio(1, 10)?;
                    if ro || page < TX_PAGES {
                        f.clean = false;
                    }
                    match f.grant(page, ro) {
                        Some(r) => r.0,
                        None => break,
                    }
                } else {
                    f.clean = false;
                    f.any_ref(u)?
                };
                let id: u16 = u.arbitrary()?;
                if !f.m.put_rx(id, gref) {
                    break;
                }
            }
            f.m.push_rx();
        }
        8 => {
            f.clean = false;
            if u.arbitrary()? {
                let b: [u8; 8] = u.arbitrary()?;
                let at = f.m.rx.req_prod_pvt().plus(u.int_in_range(0..=3)?);
                f.m.rx_raw(at, b);
            } else {
                let base = f.m.rx.req_prod_pvt();
                let v = match u.int_in_range(0..=1u8)? {
                    0 => base.plus(u.int_in_range(0..=300)?),
                    _ => RingIdx(u.arbitrary()?),
                };
                f.m.set_rx_req_prod(v);
            }
        }
        // A raw grant entry: any flags, domain and frame (the ring pages and the grant table
        // itself included).
        9 => {
            f.clean = false;
            let n = f.m.nr_grant_entries();
            let r = GrantRef(u.int_in_range(0..=n - 1)?);
            let flags = if u.ratio(3, 4)? {
                GTF_PERMIT_ACCESS | if u.arbitrary()? { GTF_READONLY } else { 0 }
            } else {
                u.arbitrary()?
            };
            let domid = if u.ratio(3, 4)? {
                DomId::DRIVER.0
            } else {
                u.arbitrary()?
            };
            let frame: u32 = if u.ratio(3, 4)? {
                u.int_in_range(0..=DATA_PAGES + 4)?
            } else {
                u.arbitrary()?
            };
            if flags & GTF_READONLY == 0 {
                f.writable.insert(frame);
            }
            f.m.gnt.raw_write_entry(r, flags, domid, frame);
            f.refs.push(r);
        }
        // A packet for the guest.
        10 => {
            let len = u.int_in_range(0..=9000usize)?;
            let seed: u8 = u.arbitrary()?;
            let frame: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
            let v = VirtioNetHdr {
                flags: u.int_in_range(0..=3)?,
                gso_type: *u.choose(&[
                    vnet::GSO_NONE,
                    vnet::GSO_NONE,
                    vnet::GSO_TCPV4,
                    vnet::GSO_TCPV6,
                    0x81,
                ])?,
                gso_size: u.arbitrary()?,
                csum_start: u.arbitrary()?,
                csum_offset: u.arbitrary()?,
                hdr_len: u.arbitrary()?,
            };
            f.nb.rx_enqueue(Packet::linear(v, frame));
        }
        11 => {
            let budget = u.int_in_range(1..=64usize)?;
            f.backend(true, budget);
        }
        12 => f.backend(false, 0),
        // A transmit rate set, changed or lifted (as `pvnet set --vif-rate` does).
        14 => {
            let rate = if u.ratio(1, 4)? {
                None
            } else {
                Some(TxRate {
                    bytes: u.int_in_range(1..=70_000)?,
                    usec: u.int_in_range(1000..=20_000)?,
                })
            };
            f.nb.set_tx_rate(rate);
        }
        // Time passes.
        15 => f.now += u.int_in_range(0..=30_000_000u64)?,
        _ => {
            // The guest consumes responses (errors are netback's to avoid, not the guest's).
            let _ = f.m.take_tx_responses();
            let _ = f.m.take_rx_responses();
        }
    }
    Ok(())
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let features = Features {
        sg: u.arbitrary()?,
        gso_tcpv4: u.arbitrary()?,
        gso_tcpv6: u.arbitrary()?,
        rx_notify: u.arbitrary()?,
    };
    let start = if u.arbitrary()? {
        RingIdx(u32::MAX - u.int_in_range(0..=300)?)
    } else {
        RingIdx(0)
    };
    // One guest memory (a memfd, mapped) for every input, zeroed and reconnected each time:
    // everything else (hypervisor, grant table, rings, event channel, netback) is new, so an
    // input runs the same alone as after others.
    let (m, nb) = match MOCK.with(|c| c.borrow_mut().take()) {
        Some(m) => m.reconnect_at(features, start),
        None => MockFrontend::connect_at(DATA_PAGES, features, start),
    }
    .expect("mock guest");
    let mut f = Fuzz {
        m,
        nb,
        writable: BTreeSet::new(),
        refs: Vec::new(),
        clean: true,
        posted: Default::default(),
        next_page: 0,
        next_id: 0,
        granted: 0,
        fatal: None,
        now: 1,
        snap: Vec::with_capacity(DATA_PAGES as usize * PAGE_SIZE),
        snap_before: Vec::with_capacity(DATA_PAGES as usize * PAGE_SIZE),
    };
    let mut steps = 0;
    while !u.is_empty() && steps < 300 {
        steps += 1;
        if step(&mut f, u).is_err() {
            break;
        }
    }
    // Drain: netback works off what is there, and the invariants hold once more.
    f.backend(true, 64);
    f.backend(false, 0);
    f.backend(true, 64);
    if f.clean {
        assert!(f.fatal.is_none());
    }
    let Fuzz { m, nb, .. } = f;
    drop(nb);
    MOCK.with(|c| *c.borrow_mut() = Some(m));
    Ok(())
}

thread_local! {
    /// The mock guest between inputs (its netback dropped).
    static MOCK: std::cell::RefCell<Option<MockFrontend>> = const { std::cell::RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
