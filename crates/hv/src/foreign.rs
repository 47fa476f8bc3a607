//! Foreign memory access: a device model reading and writing an HVM guest's memory by
//! guest-physical address.
//!
//! **This is the only place where a driver-domain process touches a guest's memory without a
//! grant.** A paravirtual backend only ever sees what the guest granted ([`crate::grant`]); an
//! emulated device cannot, because the unmodified guest does not know it is virtualized. A
//! `rep ins`/`rep outs` that reaches the device model as an ioreq with `data_is_ptr` set names a
//! guest-physical buffer of `count × size` bytes, and qemu-dm serves it by mapping the guest's
//! pages as a privileged "foreign" mapping (`xenforeignmemory_map`, its map cache) and copying
//! item by item (QEMU `hw/xen/xen-hvm-common.c`: `cpu_ioreq_pio`, `read_phys_req_item`,
//! `write_phys_req_item`). [`ForeignMemory`] is pvnet's equivalent on top of the guest's
//! [`GuestMemory`].
//!
//! Contract:
//! - Every access is checked against the guest's memory size with checked arithmetic *before* a
//!   byte moves; an access that does not fit moves no byte, returns
//!   [`ForeignError::OutOfRange`] and is counted (`out_of_range`). No access wraps around the
//!   address space.
//! - A repeated access ([`Rep`]) honours the direction flag like the x86 string instructions:
//!   item `i` of `size` bytes lives at `gpa + i × size` when `df` is clear and at
//!   `gpa − i × size` when it is set, each item in little-endian byte order at its own address.
//! - The code is safe Rust: bytes move through [`GuestMemory::read`] / [`GuestMemory::write`],
//!   page by page, so the guest can change them concurrently but never make this module read or
//!   write outside its memory. What is read is a copy; the caller validates it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::mem::GuestMemory;
use crate::{Pfn, PAGE_SIZE};

/// Why a foreign access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ForeignError {
    /// The guest-physical range is not inside the guest's memory (or its end overflows).
    #[error("guest-physical range {gpa:#x}+{len:#x} outside guest memory of {size:#x} bytes")]
    OutOfRange {
        /// Lowest address of the access.
        gpa: u64,
        /// Length in bytes (saturated at `u64::MAX` when `count × size` overflows).
        len: u64,
        /// Size of the guest's memory.
        size: u64,
    },
    /// A repeated access with no items or an item size other than 1, 2, 4 or 8.
    #[error("repeated access of {count} items of {size} bytes is malformed")]
    BadRep {
        /// Item count.
        count: u32,
        /// Item size.
        size: u32,
    },
    /// The caller's buffer does not hold exactly `count × size` bytes.
    #[error("buffer of {got} bytes for an access of {want} bytes")]
    BufferSize {
        /// Bytes the access moves.
        want: u64,
        /// Bytes in the caller's buffer.
        got: usize,
    },
}

/// A repeated access (`rep ins` / `rep outs`): `count` items of `size` bytes starting at `gpa`,
/// going up, or down when `df` (the direction flag) is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rep {
    /// Guest-physical address of item 0.
    pub gpa: u64,
    /// Number of items (at least 1).
    pub count: u32,
    /// Item size in bytes: 1, 2, 4 or 8.
    pub size: u32,
    /// Direction flag: items at decreasing addresses.
    pub df: bool,
}

impl Rep {
    /// Total bytes moved, `count × size` (cannot overflow: both are `u32`).
    pub fn len(&self) -> u64 {
        u64::from(self.count) * u64::from(self.size)
    }

    /// Whether the access moves no byte (never true for a well-formed `Rep`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn well_formed(&self) -> Result<(), ForeignError> {
        if self.count == 0 || !matches!(self.size, 1 | 2 | 4 | 8) {
            return Err(ForeignError::BadRep {
                count: self.count,
                size: self.size,
            });
        }
        Ok(())
    }

    /// The lowest address the access touches and its length, or `None` when the items would
    /// run below address 0 (`df` set) or past `u64::MAX`.
    pub fn span(&self) -> Option<(u64, u64)> {
        let len = self.len();
        let low = if self.df {
            // Item count-1 is the lowest: gpa - (count-1) * size.
            self.gpa
                .checked_sub(u64::from(self.count.checked_sub(1)?) * u64::from(self.size))?
        } else {
            self.gpa
        };
        low.checked_add(len)?;
        Some((low, len))
    }
}

/// Counters of a [`ForeignMemory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForeignStats {
    /// Accesses that read guest memory.
    pub reads: u64,
    /// Accesses that wrote guest memory.
    pub writes: u64,
    /// Bytes read from guest memory.
    pub bytes_read: u64,
    /// Bytes written to guest memory.
    pub bytes_written: u64,
    /// Accesses refused because they fell outside guest memory (no byte moved).
    pub out_of_range: u64,
    /// Accesses refused as malformed: a bad repeat or a buffer of the wrong size.
    pub malformed: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    out_of_range: AtomicU64,
    malformed: AtomicU64,
}

/// A device model's bounds-checked window on one guest's whole memory (see the module docs).
pub struct ForeignMemory {
    mem: Arc<GuestMemory>,
    size: u64,
    counters: Counters,
}

impl std::fmt::Debug for ForeignMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignMemory")
            .field("size", &self.size)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ForeignMemory {
    /// Foreign access to all of `mem`.
    pub fn new(mem: Arc<GuestMemory>) -> ForeignMemory {
        let size = u64::from(mem.pages()) * PAGE_SIZE as u64;
        ForeignMemory {
            mem,
            size,
            counters: Counters::default(),
        }
    }

    /// Size of the guest's memory in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The guest memory behind this window.
    pub fn memory(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ForeignStats {
        let c = &self.counters;
        ForeignStats {
            reads: c.reads.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            out_of_range: c.out_of_range.load(Ordering::Relaxed),
            malformed: c.malformed.load(Ordering::Relaxed),
        }
    }

    /// Whether `len` bytes at `gpa` lie inside guest memory. Counts nothing.
    pub fn check(&self, gpa: u64, len: u64) -> Result<(), ForeignError> {
        match gpa.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(ForeignError::OutOfRange {
                gpa,
                len,
                size: self.size,
            }),
        }
    }

    /// Whether `rep` is well formed and every item lies inside guest memory. Counts nothing.
    pub fn check_rep(&self, rep: &Rep) -> Result<(), ForeignError> {
        rep.well_formed()?;
        let (low, len) = rep.span().ok_or(ForeignError::OutOfRange {
            gpa: rep.gpa,
            len: rep.len(),
            size: self.size,
        })?;
        self.check(low, len)
    }

    fn count_refusal(&self, e: ForeignError) -> ForeignError {
        let c = match e {
            ForeignError::OutOfRange { .. } => &self.counters.out_of_range,
            ForeignError::BadRep { .. } | ForeignError::BufferSize { .. } => {
                &self.counters.malformed
            }
        };
        c.fetch_add(1, Ordering::Relaxed);
        e
    }

    /// Calls `f(pfn, offset, start, n)` for each page piece of the checked range
    /// `[gpa, gpa + len)`; `start` is the piece's offset into the range.
    fn pieces(
        &self,
        gpa: u64,
        len: usize,
        mut f: impl FnMut(Pfn, usize, usize, usize) -> Result<(), crate::mem::MemError>,
    ) {
        let mut done = 0usize;
        while done < len {
            let a = gpa + done as u64;
            let off = (a % PAGE_SIZE as u64) as usize;
            let n = (PAGE_SIZE - off).min(len - done);
            // The range was checked to lie inside guest memory, whose page count is a u32.
            let pfn = Pfn((a / PAGE_SIZE as u64) as u32);
            f(pfn, off, done, n).expect("range checked against guest memory");
            done += n;
        }
    }

    /// Copies `out.len()` bytes of guest memory at `gpa` into `out`.
    pub fn read(&self, gpa: u64, out: &mut [u8]) -> Result<(), ForeignError> {
        self.check(gpa, out.len() as u64)
            .map_err(|e| self.count_refusal(e))?;
        self.pieces(gpa, out.len(), |pfn, off, start, n| {
            self.mem.read(pfn, off, &mut out[start..start + n])
        });
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Copies `data` into guest memory at `gpa`.
    pub fn write(&self, gpa: u64, data: &[u8]) -> Result<(), ForeignError> {
        self.check(gpa, data.len() as u64)
            .map_err(|e| self.count_refusal(e))?;
        self.pieces(gpa, data.len(), |pfn, off, start, n| {
            self.mem.write(pfn, off, &data[start..start + n])
        });
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn check_rep_buffer(&self, rep: &Rep, got: usize) -> Result<(), ForeignError> {
        self.check_rep(rep).map_err(|e| self.count_refusal(e))?;
        if rep.len() != got as u64 {
            return Err(self.count_refusal(ForeignError::BufferSize {
                want: rep.len(),
                got,
            }));
        }
        Ok(())
    }

    /// Reads the items of `rep` (a `rep outs`: guest memory to device) into `out`, item 0 first:
    /// `out[i*size..(i+1)*size]` is the item at `rep.gpa ± i × size`. `out` must hold exactly
    /// `count × size` bytes.
    pub fn read_rep(&self, rep: &Rep, out: &mut [u8]) -> Result<(), ForeignError> {
        self.check_rep_buffer(rep, out.len())?;
        let size = rep.size as usize;
        if !rep.df {
            self.pieces(rep.gpa, out.len(), |pfn, off, start, n| {
                self.mem.read(pfn, off, &mut out[start..start + n])
            });
        } else {
            for (i, item) in out.chunks_exact_mut(size).enumerate() {
                // In range: the whole span was checked and item i is inside it.
                let a = rep.gpa - (i * size) as u64;
                self.pieces(a, size, |pfn, off, start, n| {
                    self.mem.read(pfn, off, &mut item[start..start + n])
                });
            }
        }
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_read
            .fetch_add(rep.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Writes `data` as the items of `rep` (a `rep ins`: device to guest memory), item 0 first,
    /// laid out as in [`ForeignMemory::read_rep`]. `data` must hold exactly `count × size` bytes.
    pub fn write_rep(&self, rep: &Rep, data: &[u8]) -> Result<(), ForeignError> {
        self.check_rep_buffer(rep, data.len())?;
        let size = rep.size as usize;
        if !rep.df {
            self.pieces(rep.gpa, data.len(), |pfn, off, start, n| {
                self.mem.write(pfn, off, &data[start..start + n])
            });
        } else {
            for (i, item) in data.chunks_exact(size).enumerate() {
                let a = rep.gpa - (i * size) as u64;
                self.pieces(a, size, |pfn, off, start, n| {
                    self.mem.write(pfn, off, &item[start..start + n])
                });
            }
        }
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_written
            .fetch_add(rep.len(), Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fm(pages: u32) -> ForeignMemory {
        ForeignMemory::new(Arc::new(GuestMemory::create("f", pages).unwrap()))
    }

    #[test]
    fn read_write_across_pages_intact() {
        let f = fm(3);
        let data: Vec<u8> = (0..6000u32).map(|i| (i * 7 + 3) as u8).collect();
        f.write(4000, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read(4000, &mut back).unwrap();
        assert_eq!(back, data);
        // The bytes really are at those guest-physical addresses.
        let mut one = [0u8; 1];
        f.memory().read(Pfn(1), 5000 - 4096, &mut one).unwrap();
        assert_eq!(one[0], data[1000]);
        let s = f.stats();
        assert_eq!((s.reads, s.writes), (1, 1));
        assert_eq!((s.bytes_read, s.bytes_written), (6000, 6000));
        assert_eq!(s.out_of_range, 0);
    }

    #[test]
    fn out_of_range_refused_counted_and_untouched() {
        let f = fm(2);
        let size = f.size();
        assert_eq!(size, 8192);
        // Up to the last byte is fine.
        f.write(size - 4, &[1, 2, 3, 4]).unwrap();
        let cases: [(u64, usize); 4] = [(size - 3, 4), (size, 1), (u64::MAX, 2), (u64::MAX - 1, 8)];
        for (i, &(gpa, len)) in cases.iter().enumerate() {
            let e = f.write(gpa, &vec![0xEE; len]).unwrap_err();
            assert!(matches!(e, ForeignError::OutOfRange { .. }), "{e}");
            assert_eq!(f.stats().out_of_range, 2 * i as u64 + 1);
            let mut out = vec![0u8; len];
            assert!(f.read(gpa, &mut out).is_err());
            assert_eq!(out, vec![0; len], "no byte moved");
            assert_eq!(f.stats().out_of_range, 2 * i as u64 + 2);
        }
        let mut tail = [0u8; 4];
        f.read(size - 4, &mut tail).unwrap();
        assert_eq!(tail, [1, 2, 3, 4], "the refused writes changed nothing");
        assert_eq!(f.stats().writes, 1);
    }

    #[test]
    fn rep_up_and_down() {
        let f = fm(2);
        let items: Vec<u8> = (0u8..12).collect(); // 6 items of 2 bytes
        let up = Rep {
            gpa: 4090,
            count: 6,
            size: 2,
            df: false,
        };
        f.write_rep(&up, &items).unwrap();
        let mut flat = [0u8; 12];
        f.read(4090, &mut flat).unwrap();
        assert_eq!(&flat[..], &items[..]);

        // df: item i at 200 - 2i, each item little-endian at its own address.
        let down = Rep {
            gpa: 200,
            count: 6,
            size: 2,
            df: true,
        };
        assert_eq!(down.span(), Some((190, 12)));
        f.write_rep(&down, &items).unwrap();
        let mut mem = [0u8; 12];
        f.read(190, &mut mem).unwrap();
        assert_eq!(mem, [10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1]);
        let mut back = [0u8; 12];
        f.read_rep(&down, &mut back).unwrap();
        assert_eq!(&back[..], &items[..]);
        let mut back_up = [0u8; 12];
        f.read_rep(&up, &mut back_up).unwrap();
        assert_eq!(&back_up[..], &items[..]);
    }

    #[test]
    fn bad_reps_refused_and_counted() {
        let f = fm(1);
        let mut buf = [0u8; 16];
        let bad = [
            // Runs below address 0 going down.
            (
                Rep {
                    gpa: 4,
                    count: 4,
                    size: 2,
                    df: true,
                },
                8,
                true,
            ),
            // Runs past the end going up.
            (
                Rep {
                    gpa: 4090,
                    count: 4,
                    size: 2,
                    df: false,
                },
                8,
                true,
            ),
            // Wraps the address space.
            (
                Rep {
                    gpa: u64::MAX - 1,
                    count: 2,
                    size: 2,
                    df: false,
                },
                4,
                true,
            ),
            // Malformed: no items, odd size.
            (
                Rep {
                    gpa: 0,
                    count: 0,
                    size: 2,
                    df: false,
                },
                0,
                false,
            ),
            (
                Rep {
                    gpa: 0,
                    count: 1,
                    size: 3,
                    df: false,
                },
                3,
                false,
            ),
            // Buffer of the wrong size.
            (
                Rep {
                    gpa: 0,
                    count: 2,
                    size: 4,
                    df: false,
                },
                4,
                false,
            ),
        ];
        let mut oor = 0;
        let mut mal = 0;
        for (rep, len, range) in bad {
            assert!(f.write_rep(&rep, &buf[..len]).is_err(), "{rep:?}");
            assert!(f.read_rep(&rep, &mut buf[..len]).is_err(), "{rep:?}");
            if range {
                oor += 2;
            } else {
                mal += 2;
            }
            let s = f.stats();
            assert_eq!((s.out_of_range, s.malformed), (oor, mal), "{rep:?}");
        }
        assert_eq!(buf, [0; 16]);
        let s = f.stats();
        assert_eq!((s.reads, s.writes), (0, 0));
        // Exactly reaching address 0 going down is fine.
        let edge = Rep {
            gpa: 6,
            count: 4,
            size: 2,
            df: true,
        };
        f.write_rep(&edge, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let mut m = [0u8; 8];
        f.read(0, &mut m).unwrap();
        assert_eq!(m, [7, 8, 5, 6, 3, 4, 1, 2]);
    }
}
