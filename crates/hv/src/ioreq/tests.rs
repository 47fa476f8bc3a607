//! Layout, validation and hostile-slot tests of the ioreq page, driven from one thread.
//! (Round trips between threads and processes are in `tests/ioreq.rs` and
//! `tests/ioreq_process.rs`.)

use super::*;
use crate::evtchn::channel_pair;
use std::mem::{offset_of, size_of};

const PORT: Port = Port(7);

fn page(nr: u32) -> Arc<IoreqPage> {
    Arc::new(IoreqPage::create("ioreq-test", nr, 0).unwrap())
}

/// A server on vCPU 0 of a fresh page, and the vCPU's end of the channel.
fn server(mem_pages: u32) -> (IoreqServer, EvtchnEnd, Arc<IoreqPage>) {
    let p = page(1);
    let (vcpu_end, dm_end) = channel_pair().unwrap();
    let mut s = IoreqServer::new(p.clone(), 0, PORT, dm_end).unwrap();
    if mem_pages > 0 {
        let m = Arc::new(GuestMemory::create("guest", mem_pages).unwrap());
        s = s.with_memory(Arc::new(ForeignMemory::new(m)));
    }
    (s, vcpu_end, p)
}

fn page_bytes(p: &IoreqPage, off: usize, out: &mut [u8]) {
    p.mem.read(Pfn(0), off, out).unwrap();
}

/// A READY slot for a valid 1-byte `IN` from port 0x300 on our port.
fn good_raw() -> RawIoreq {
    Ioreq::pio_in(0x300, 1).to_raw(STATE_IOREQ_READY, PORT)
}

#[test]
fn layout_matches_xen() {
    assert_eq!(size_of::<IoreqSlot>(), 32);
    assert_eq!(std::mem::align_of::<IoreqSlot>(), 8);
    assert_eq!(offset_of!(IoreqSlot, addr), 0);
    assert_eq!(offset_of!(IoreqSlot, data), 8);
    assert_eq!(offset_of!(IoreqSlot, count), 16);
    assert_eq!(offset_of!(IoreqSlot, size), 20);
    assert_eq!(offset_of!(IoreqSlot, vp_eport), 24);
    assert_eq!(offset_of!(IoreqSlot, pad0), 28);
    assert_eq!(offset_of!(IoreqSlot, bits), 30);
    assert_eq!(offset_of!(IoreqSlot, type_), 31);
    assert_eq!(
        (IOREQ_READ, IOREQ_WRITE, IOREQ_TYPE_PIO, IOREQ_TYPE_COPY),
        (1, 0, 0, 1)
    );
    assert_eq!(
        (
            STATE_IOREQ_NONE,
            STATE_IOREQ_READY,
            STATE_IOREQ_INPROCESS,
            STATE_IORESP_READY
        ),
        (0, 1, 2, 3)
    );
    assert_eq!(DEVICE_AREA_OFFSET, 1024);
}

#[test]
fn slot_bytes_are_the_c_struct() {
    let p = page(3);
    // `rep insw` of 0x1234 items from port 0x10 into 0x1122334455667788, df set, vCPU 2.
    let raw = Ioreq::pio_ins(0x10, 2, 0x1234, 0x1122_3344_5566_7788, true)
        .to_raw(STATE_IOREQ_READY, Port(0xabcd));
    p.write_slot_raw(2, &raw).unwrap();
    let mut b = [0u8; 32];
    page_bytes(&p, 64, &mut b);
    #[rustfmt::skip]
    let want: [u8; 32] = [
        0x10, 0, 0, 0, 0, 0, 0, 0,                          // addr
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,     // data
        0x34, 0x12, 0, 0,                                   // count
        2, 0, 0, 0,                                         // size
        0xcd, 0xab, 0, 0,                                   // vp_eport
        0, 0,                                               // _pad0
        0x01 | 0x10 | 0x20 | 0x40,                          // state READY, data_is_ptr, dir read, df
        0,                                                  // type PIO
    ];
    assert_eq!(b, want);
    assert_eq!(raw.to_bytes(), want);
    assert_eq!(p.slot_state(2).unwrap(), STATE_IOREQ_READY);
    // The other slots are untouched.
    let mut rest = [0u8; 64];
    page_bytes(&p, 0, &mut rest);
    assert_eq!(rest, [0; 64]);
    // A plain MMIO write: no flag bits but the state, type COPY.
    let w = Ioreq {
        kind: IoType::Copy,
        ..Ioreq::pio_out(0, 4, 5)
    }
    .to_raw(STATE_IORESP_READY, PORT);
    assert_eq!((w.bits, w.type_), (3, 1));
    assert_eq!(
        p.slot_state(3).unwrap_err().to_string(),
        "vcpu 3 out of range: the page has 3 slots"
    );
}

#[test]
fn page_geometry_and_fd_sharing() {
    assert!(IoreqPage::create("x", 0, 0).is_err());
    assert!(IoreqPage::create("x", MAX_VCPUS + 1, 0).is_err());
    let one = IoreqPage::create("x", MAX_VCPUS, 0).unwrap();
    assert_eq!(one.device_area_len(), 4096 - 1024);
    let two = IoreqPage::create("x", 1, 4096).unwrap();
    assert_eq!(two.device_area_len(), 2 * 4096 - 1024);
    // A second mapping through the fd sees the same slots.
    let fd = two.fd().try_clone_to_owned().unwrap();
    let other = IoreqPage::from_fd(fd, 1).unwrap();
    two.write_slot_raw(0, &good_raw()).unwrap();
    assert_eq!(other.slot_state(0).unwrap(), STATE_IOREQ_READY);
    // An unsealed file is refused.
    let raw = nix::sys::memfd::memfd_create("u", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&raw, 4096).unwrap();
    assert!(IoreqPage::from_fd(raw, 1).is_err());
}

#[repr(C)]
struct NeLike {
    cmd: AtomicU8,
    isr: AtomicU8,
    imr: AtomicU8,
    _pad: AtomicU8,
    curpag: AtomicU32,
    counters: [AtomicU64; 4],
}
// SAFETY: repr(C), made only of integer atomics and an array of them.
unsafe impl SharedPlain for NeLike {}

#[test]
fn device_state_is_shared_bounded_and_aligned() {
    let p = IoreqPage::create("x", 1, 0).unwrap();
    let fd = p.fd().try_clone_to_owned().unwrap();
    let q = IoreqPage::from_fd(fd, 1).unwrap();
    let a: &NeLike = p.device_state().unwrap();
    let b: &NeLike = q.device_state().unwrap();
    assert_eq!(a.isr.load(Ordering::Relaxed), 0, "starts zeroed");
    a.isr.store(0x40, Ordering::Release);
    a.counters[3].store(99, Ordering::Release);
    assert_eq!(b.isr.load(Ordering::Acquire), 0x40);
    assert_eq!(b.counters[3].load(Ordering::Acquire), 99);
    // At the device area's offset in the page, not on a slot.
    let mut byte = [0u8; 1];
    page_bytes(&p, DEVICE_AREA_OFFSET + 1, &mut byte);
    assert_eq!(byte[0], 0x40);

    // The largest array that fits, and one byte more.
    let area = p.device_area_len();
    assert_eq!(area, 3072);
    assert!(p.device_state::<[AtomicU64; 384]>().is_ok());
    assert!(matches!(
        p.device_state::<[AtomicU8; 3073]>(),
        Err(IoreqError::DeviceStateFit {
            size: 3073,
            area: 3072,
            ..
        })
    ));
    assert!(p.device_state_at::<AtomicU64>(3064).is_ok());
    assert!(
        p.device_state_at::<AtomicU64>(3065).is_err(),
        "past the end and misaligned"
    );
    assert!(p.device_state_at::<AtomicU32>(2).is_err(), "misaligned");
    assert!(
        p.device_state_at::<AtomicU8>(usize::MAX).is_err(),
        "offset overflow"
    );
}

#[test]
fn valid_request_is_taken_once_and_answered() {
    let (mut s, vcpu_end, p) = server(0);
    assert_eq!(s.next(), None, "nothing READY");
    assert_eq!(s.stats().spurious, 1);
    let raw = Ioreq::pio_out(0x3ff, 2, 0xdead_beef).to_raw(STATE_IOREQ_READY, PORT);
    p.write_slot_raw(0, &raw).unwrap();
    let req = s.next().unwrap();
    assert_eq!(
        req,
        Ioreq {
            data: 0xbeef,
            ..Ioreq::pio_out(0x3ff, 2, 0)
        },
        "data masked to size"
    );
    assert_eq!(p.slot_state(0).unwrap(), STATE_IOREQ_INPROCESS);
    assert!(s.in_process());
    s.complete(0x55).unwrap();
    assert_eq!(p.slot_state(0).unwrap(), STATE_IORESP_READY);
    assert_eq!(vcpu_end.consume(), 1, "the vCPU was notified");
    assert!(matches!(s.complete(1), Err(IoreqError::NotInProcess)));
    let st = s.stats();
    assert_eq!(
        (st.slot_copies, st.requests_served, st.refused_total()),
        (1, 1, 0)
    );
    // The answer kept the request's flag bits and wrote data.
    let mut b = [0u8; 32];
    page_bytes(&p, 0, &mut b);
    assert_eq!(b[30], STATE_IORESP_READY);
    assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0x55);
}

/// One hostile slot per bad field: each is answered (state IORESP_READY, the vCPU notified),
/// reads get all ones, and exactly its own counter moves.
#[test]
fn every_bad_field_is_answered_and_counted() {
    let good = good_raw();
    let ptr_in = Ioreq::pio_ins(0x300, 2, 8, 0x1000, false).to_raw(STATE_IOREQ_READY, PORT);
    let cases: Vec<(&str, RawIoreq, Refusal, u32)> = vec![
        ("size 0", RawIoreq { size: 0, ..good }, Refusal::BadSize, 2),
        ("size 3", RawIoreq { size: 3, ..good }, Refusal::BadSize, 2),
        (
            "size 16",
            RawIoreq { size: 16, ..good },
            Refusal::BadSize,
            2,
        ),
        (
            "size huge",
            RawIoreq {
                size: u32::MAX,
                ..good
            },
            Refusal::BadSize,
            2,
        ),
        (
            "count 0",
            RawIoreq { count: 0, ..good },
            Refusal::BadCount,
            2,
        ),
        (
            "count 2 no ptr",
            RawIoreq { count: 2, ..good },
            Refusal::BadCount,
            2,
        ),
        (
            "ptr count 0",
            RawIoreq { count: 0, ..ptr_in },
            Refusal::BadCount,
            2,
        ),
        (
            "ptr count huge",
            RawIoreq {
                count: u32::MAX,
                ..ptr_in
            },
            Refusal::BadCount,
            2,
        ),
        (
            "ptr 64K+2",
            RawIoreq {
                count: 32769,
                ..ptr_in
            },
            Refusal::BadCount,
            2,
        ),
        ("type 2", RawIoreq { type_: 2, ..good }, Refusal::BadType, 2),
        (
            "type 255",
            RawIoreq { type_: 255, ..good },
            Refusal::BadType,
            2,
        ),
        (
            "port 0x10000",
            RawIoreq {
                addr: 0x1_0000,
                ..good
            },
            Refusal::BadAddr,
            2,
        ),
        (
            "port straddles",
            RawIoreq {
                addr: 0xffff,
                size: 2,
                ..good
            },
            Refusal::BadAddr,
            2,
        ),
        (
            "port u64::MAX",
            RawIoreq {
                addr: u64::MAX,
                ..good
            },
            Refusal::BadAddr,
            2,
        ),
        (
            "ptr past end",
            RawIoreq {
                data: 2 * 4096 - 15,
                ..ptr_in
            },
            Refusal::BadPtr,
            2,
        ),
        (
            "ptr wraps",
            RawIoreq {
                data: u64::MAX - 3,
                ..ptr_in
            },
            Refusal::BadPtr,
            2,
        ),
        (
            "ptr below 0 (df)",
            RawIoreq {
                data: 8,
                bits: ptr_in.bits | BIT_DF,
                ..ptr_in
            },
            Refusal::BadPtr,
            2,
        ),
        ("ptr no memory", ptr_in, Refusal::NoMemory, 0),
        (
            "wrong port",
            RawIoreq {
                vp_eport: 8,
                ..good
            },
            Refusal::BadPort,
            2,
        ),
    ];
    for (name, raw, reason, mem_pages) in cases {
        let (mut s, vcpu_end, p) = server(mem_pages);
        p.write_slot_raw(0, &raw).unwrap();
        assert_eq!(s.next(), None, "{name}");
        let st = s.stats();
        for r in Refusal::ALL {
            let want = u64::from(r == reason);
            assert_eq!(st.refused(r), want, "{name}: counter {}", r.name());
        }
        assert_eq!((st.slot_copies, st.requests_served), (1, 0), "{name}");
        assert!(!s.in_process(), "{name}");
        assert_eq!(
            p.slot_state(0).unwrap(),
            STATE_IORESP_READY,
            "{name}: answered"
        );
        assert_eq!(vcpu_end.consume(), 1, "{name}: notified");
        let mut b = [0u8; 8];
        page_bytes(&p, 8, &mut b);
        let data = u64::from_le_bytes(b);
        if raw.data_is_ptr() {
            assert_eq!(data, raw.data, "{name}: pointer left as it was");
        } else {
            assert_eq!(data, u64::MAX, "{name}: a refused read reads all ones");
        }
    }
}

#[test]
fn other_states_are_not_taken() {
    let (mut s, vcpu_end, p) = server(0);
    for state in [0u8, 2, 3, 4, 9, 15] {
        p.write_slot_raw(
            0,
            &RawIoreq {
                bits: state,
                ..good_raw()
            },
        )
        .unwrap();
        assert_eq!(s.next(), None);
        assert_eq!(p.slot_state(0).unwrap(), state, "left alone");
    }
    let st = s.stats();
    assert_eq!((st.spurious, st.slot_copies, st.refused_total()), (6, 0, 0));
    assert_eq!(vcpu_end.consume(), 0, "no answer, no event");
}

/// The device model reads the slot once per request: what the guest writes afterwards is never
/// seen, not while the request is in process, not by `complete`.
#[test]
fn slot_is_read_once() {
    let (mut s, _vcpu_end, p) = server(0);
    let raw = Ioreq::pio_out(0x300, 1, 0x12).to_raw(STATE_IOREQ_READY, PORT);
    p.write_slot_raw(0, &raw).unwrap();
    let req = s.next().unwrap();
    // The guest rewrites the slot: a different, invalid, READY request with other flags.
    let evil = RawIoreq {
        addr: 0x1_0000,
        data: 7,
        size: 3,
        count: 0,
        bits: STATE_IOREQ_READY | BIT_DATA_IS_PTR | BIT_DF | BIT_DIR,
        type_: 200,
        ..raw
    };
    p.write_slot_raw(0, &evil).unwrap();
    assert_eq!(req.addr, 0x300, "the copy is the request");
    assert_eq!(s.next(), None, "in process: the slot is not looked at");
    s.complete(0).unwrap();
    let st = s.stats();
    assert_eq!((st.slot_copies, st.spurious, st.refused_total()), (1, 0, 0));
    assert_eq!(st.requests_served, 1);
    let mut b = [0u8; 32];
    page_bytes(&p, 0, &mut b);
    assert_eq!(
        b[30], STATE_IORESP_READY,
        "answer flags from the copy (a plain write)"
    );
    assert_eq!(b[31], 200, "complete writes only data and the state byte");
}

/// Random slot contents, many times: never a panic, always either a request or an answer.
#[test]
fn random_slots_never_panic() {
    let (mut s, vcpu_end, p) = server(2);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut taken = 0u64;
    for i in 0..20_000u64 {
        let r = [rnd(), rnd(), rnd(), rnd()];
        // Bias toward almost-valid requests so the deep checks are reached too.
        let raw = RawIoreq {
            addr: if i % 2 == 0 { r[0] & 0x1ffff } else { r[0] },
            data: if i % 3 == 0 { r[1] & 0x3fff } else { r[1] },
            count: if i % 2 == 0 {
                (r[2] & 0x7ff) as u32
            } else {
                r[2] as u32
            },
            size: if i % 2 == 0 {
                1 << (r[2] >> 40 & 3)
            } else {
                (r[2] >> 32) as u32
            },
            vp_eport: if i % 5 == 0 { r[3] as u32 } else { PORT.0 },
            pad0: (r[3] >> 32) as u16,
            bits: ((r[3] >> 48) as u8 & !STATE_MASK) | STATE_IOREQ_READY,
            type_: if i % 2 == 0 {
                (r[3] >> 56) as u8 & 1
            } else {
                (r[3] >> 56) as u8
            },
        };
        p.write_slot_raw(0, &raw).unwrap();
        if let Some(req) = s.next() {
            taken += 1;
            assert!(req.check().is_ok());
            if let Some(rep) = req.rep() {
                s.memory().unwrap().check_rep(&rep).unwrap();
            }
            s.complete(0).unwrap();
        }
        assert_eq!(p.slot_state(0).unwrap(), STATE_IORESP_READY);
        assert_eq!(vcpu_end.consume(), 1);
    }
    let st = s.stats();
    assert_eq!(st.slot_copies, 20_000);
    assert_eq!(st.requests_served, taken);
    assert_eq!(st.requests_served + st.refused_total(), 20_000);
    assert!(taken > 0 && st.refused_total() > 0, "both paths exercised");
}

#[test]
fn client_refuses_bad_requests_locally_and_busy_slots() {
    let p = page(2);
    let (vcpu_end, _dm_end) = channel_pair().unwrap();
    let mut c = IoreqClient::new(p.clone(), 1, PORT, vcpu_end).unwrap();
    for (req, why) in [
        (Ioreq::pio_in(0x300, 3), Refusal::BadSize),
        (Ioreq::pio_ins(0x300, 2, 0, 0, false), Refusal::BadCount),
        (
            Ioreq {
                count: 2,
                ..Ioreq::pio_in(0x300, 1)
            },
            Refusal::BadCount,
        ),
        (Ioreq::pio_in(0xffff, 4), Refusal::BadAddr),
    ] {
        match c.round_trip(&req) {
            Err(IoreqError::Invalid(r)) => assert_eq!(r, why),
            other => panic!("{req:?}: {other:?}"),
        }
    }
    assert_eq!(p.slot_state(1).unwrap(), STATE_IOREQ_NONE, "nothing sent");
    assert_eq!(c.stats().refused_local, 4);
    assert_eq!(c.stats().requests_sent, 0);
    // A slot left READY (say by an abandoned round trip) is not overwritten.
    p.write_slot_raw(1, &good_raw()).unwrap();
    assert!(matches!(
        c.round_trip(&Ioreq::pio_in(0x300, 1)),
        Err(IoreqError::SlotBusy(1))
    ));
    assert_eq!(c.stats().slot_busy, 1);
    assert!(IoreqClient::new(p, 2, PORT, channel_pair().unwrap().0).is_err());
}

/// A guest thread rewrites the slot as fast as it can while the device model takes and answers
/// requests: every copy is validated as a whole, nothing panics, the counters add up.
#[test]
fn slot_rewritten_concurrently_never_panics() {
    let (mut s, _vcpu_end, p) = server(1);
    let stop = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let guest = {
        let (p, stop, written) = (p.clone(), stop.clone(), written.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while stop.load(Ordering::Relaxed) == 0 {
                i += 1;
                written.store(i, Ordering::Relaxed);
                let raw = RawIoreq {
                    addr: 0x300 + (i % 3) * 0x8000,
                    data: i,
                    count: (i % 3) as u32,
                    size: 1 << (i % 5),
                    vp_eport: PORT.0,
                    pad0: 0,
                    bits: STATE_IOREQ_READY | ((i as u8 & 7) << 4),
                    type_: (i % 3) as u8,
                };
                p.write_slot_raw(0, &raw).unwrap();
            }
            i
        })
    };
    let mut taken = 0u64;
    let mut looks = 0u64;
    // Until both sides have done plenty, however the two threads get scheduled.
    while looks < 100_000 || written.load(Ordering::Relaxed) < 100_000 {
        looks += 1;
        if let Some(req) = s.next() {
            taken += 1;
            assert!(req.check().is_ok(), "{req:?}");
            if let Some(rep) = req.rep() {
                s.memory().unwrap().check_rep(&rep).unwrap();
            }
            s.complete(req.data).unwrap();
        }
    }
    stop.store(1, Ordering::Relaxed);
    let writes = guest.join().unwrap();
    let st = s.stats();
    assert!(writes >= 100_000);
    assert_eq!(st.requests_served, taken);
    assert_eq!(st.slot_copies, st.requests_served + st.refused_total());
    assert_eq!(st.slot_copies + st.spurious, looks);
}
