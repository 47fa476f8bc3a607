//! A toy device model for the ioreq round-trip tests, shared by the thread and process tests.
//!
//! Ports: `REGS..REGS+16` are sixteen registers (a read returns the value written plus one, so a
//! test can tell the device model computed the answer); `DATA` is a byte FIFO (plain `IN`/`OUT`
//! pop and push `size` bytes little-endian; `rep ins`/`rep outs` move `count × size` bytes
//! between the FIFO and guest memory); `LEN` reads the FIFO's length and `SUM` the wrapping sum
//! of every byte ever pushed. Any other read returns all ones.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::Duration;

use pvnet_hv::foreign::ForeignMemory;
use pvnet_hv::ioreq::{Dir, Ioreq, IoreqServer};

pub const REGS: u16 = 0x300;
pub const DATA: u16 = 0x310;
pub const LEN: u16 = 0x318;
pub const SUM: u16 = 0x31c;

#[derive(Default, Debug)]
pub struct Toy {
    regs: [u64; 16],
    fifo: VecDeque<u8>,
    sum: u32,
}

impl Toy {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.fifo.push_back(b);
            self.sum = self.sum.wrapping_add(u32::from(b));
        }
    }

    fn pop(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.fifo.pop_front().unwrap_or(0)).collect()
    }

    /// Serves one validated request; returns the answer's `data`.
    pub fn serve(&mut self, req: &Ioreq, mem: Option<&ForeignMemory>) -> u64 {
        let port = req.addr as u16;
        if let Some(rep) = req.rep() {
            let mem = mem.expect("the server refuses data_is_ptr without memory");
            if port == DATA {
                match req.dir {
                    Dir::Write => {
                        let mut buf = vec![0u8; rep.len() as usize];
                        mem.read_rep(&rep, &mut buf)
                            .expect("range checked by the server");
                        self.push(&buf);
                    }
                    Dir::Read => {
                        let buf = self.pop(rep.len() as usize);
                        mem.write_rep(&rep, &buf)
                            .expect("range checked by the server");
                    }
                }
            }
            return req.data;
        }
        let size = req.size as usize;
        match (port, req.dir) {
            (p, Dir::Write) if (REGS..REGS + 16).contains(&p) => {
                self.regs[usize::from(p - REGS)] = req.data;
                0
            }
            (p, Dir::Read) if (REGS..REGS + 16).contains(&p) => {
                self.regs[usize::from(p - REGS)].wrapping_add(1)
            }
            (DATA, Dir::Write) => {
                self.push(&req.data.to_le_bytes()[..size]);
                0
            }
            (DATA, Dir::Read) => {
                let mut b = [0u8; 8];
                b[..size].copy_from_slice(&self.pop(size));
                u64::from_le_bytes(b)
            }
            (LEN, Dir::Read) => self.fifo.len() as u64,
            (SUM, Dir::Read) => u64::from(self.sum),
            (_, Dir::Read) => u64::MAX,
            (_, Dir::Write) => 0,
        }
    }
}

/// Serves requests until `served + refused` reaches `n`, or nothing arrives for `idle`
/// (then returns false).
pub fn serve_n(server: &mut IoreqServer, toy: &mut Toy, n: u64, idle: Duration) -> bool {
    let handled = |s: &IoreqServer| s.stats().requests_served + s.stats().refused_total();
    while handled(server) < n {
        // Look before blocking: a request may have arrived with an event already consumed.
        while let Some(req) = server.next() {
            let data = toy.serve(&req, server.memory().map(|m| &**m));
            server.complete(data).expect("a request is in process");
        }
        if handled(server) >= n {
            break;
        }
        if !server.wait(Some(idle)).expect("poll") {
            return false;
        }
    }
    true
}

/// The value the i-th register test writes: varied widths of data.
pub fn value(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 3)
}

pub fn mask(size: u32) -> u64 {
    if size == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * size)) - 1
    }
}

/// Median and 99th percentile of `v` (sorted in place), in the unit given.
pub fn median_p99(v: &mut [u64]) -> (u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}
