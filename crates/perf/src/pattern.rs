//! Content pattern a receiver can verify at memory speed.
//!
//! The byte at absolute stream offset `k` is `table[k % PERIOD]`, where the table is a fixed
//! pseudo-random sequence and [`PERIOD`] is prime (65521). A lost, duplicated or reordered chunk
//! shifts every following byte by its length; unless that length is a multiple of the period the
//! shifted bytes no longer match (≈ 255/256 of them differ), so the error is detected.
//!
//! The table is stored twice back to back, so any run of up to `PERIOD` bytes starting anywhere in
//! the period is one contiguous slice: fill is a `memcpy`, verify is a slice compare (`memcmp`).
//! Bytes are only counted one by one when the fast compare of a chunk fails.
//!
//! Receivers started by one parent can share one copy of the table ([`shared_memfd`],
//! [`SHARED_FD_ENV`]): eight receivers on one CPU otherwise keep eight private 128 KiB copies
//! of the same bytes in that CPU's cache, a cost of the measurement that grows with the number
//! of guests measured. A shared table is a sealed memfd, mapped read-only and checked against
//! the generated table once before it is used; anything else falls back to a private copy.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};

/// Period of the pattern in bytes (the largest prime below 2^16).
pub const PERIOD: usize = 65521;

/// The environment variable that names an inherited file descriptor holding the table (a
/// memfd from [`shared_memfd`]).
pub const SHARED_FD_ENV: &str = "PVNET_PATTERN_FD";

/// Two consecutive periods of the pattern: the shared table named by [`SHARED_FD_ENV`] when
/// there is a valid one, a private copy otherwise.
fn table() -> &'static [u8] {
    static TABLE: OnceLock<&'static [u8]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let Ok(v) = std::env::var(SHARED_FD_ENV) else {
            return Box::leak(generate());
        };
        match table_from_fd_number(&v) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("pvnet perf: pattern table from {SHARED_FD_ENV}={v} refused ({e}); using a private copy");
                Box::leak(generate())
            }
        }
    })
}

/// The shared table behind the descriptor number `v` (as [`SHARED_FD_ENV`] gives it).
fn table_from_fd_number(v: &str) -> Result<&'static [u8], String> {
    let n: i32 = v
        .parse()
        .map_err(|_| "not a descriptor number".to_string())?;
    if n < 0 {
        return Err("not a descriptor number".into());
    }
    // The descriptor must be open; it is borrowed only for the mapping, which outlives it.
    // SAFETY: F_GETFD only reads a descriptor's flags; a number that is not open gives EBADF.
    if unsafe { libc::fcntl(n, libc::F_GETFD) } < 0 {
        return Err(format!("descriptor {n} is not open"));
    }
    // SAFETY: `n` is an open descriptor (checked above) that this process inherited for this
    // purpose; it is only borrowed for the duration of `map_shared`.
    let fd = unsafe { BorrowedFd::borrow_raw(n) };
    map_shared(fd)
}

/// A sealed memfd holding the table, for receivers this process starts: pass it inherited
/// (without `FD_CLOEXEC`) and name it in [`SHARED_FD_ENV`]. The seals forbid writing,
/// shrinking and growing it, so what a receiver checked once stays the table.
pub fn shared_memfd() -> io::Result<OwnedFd> {
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    sealed_memfd("pvnet-pattern", &generate(), seals)
}

/// A close-on-exec memfd named `name` holding `bytes`, then sealed with `seals`.
fn sealed_memfd(name: &str, bytes: &[u8], seals: SealFlag) -> io::Result<OwnedFd> {
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
        .map_err(io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, bytes)?;
    let fd = OwnedFd::from(file);
    fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).map_err(io::Error::from)?;
    Ok(fd)
}

/// Maps `fd` read-only for the rest of the process, if it is a sealed memfd holding exactly
/// the table: its size, its seals (no write, shrink or grow) and every byte are checked.
fn map_shared(fd: BorrowedFd<'_>) -> Result<&'static [u8], String> {
    let len = 2 * PERIOD;
    let st = nix::sys::stat::fstat(fd).map_err(|e| format!("fstat: {e}"))?;
    if st.st_size != len as i64 {
        return Err(format!("{} bytes, not {len}", st.st_size));
    }
    let seals = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(|e| format!("not a sealed memfd: {e}"))?;
    let need = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
    if !SealFlag::from_bits_truncate(seals).contains(need) {
        return Err("not sealed against writing and resizing".into());
    }
    // SAFETY: a fresh read-only shared mapping of `len` bytes of a file that is exactly `len`
    // bytes long and sealed against writing and shrinking, so every mapped page stays backed
    // and no one can change its bytes; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_fd().as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap: {}", io::Error::last_os_error()));
    }
    // SAFETY: `p` is the start of the `len`-byte read-only mapping made above; it is never
    // unmapped unless refused below, so the slice may live for the rest of the process.
    let t: &'static [u8] = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    if *t != *generate() {
        // SAFETY: unmaps exactly the mapping made above; `t` is not used after this.
        unsafe { libc::munmap(p, len) };
        return Err("its bytes are not the pattern".into());
    }
    Ok(t)
}

/// Generates the table: two consecutive periods of the pattern.
fn generate() -> Box<[u8]> {
    let mut t = vec![0u8; 2 * PERIOD];
    // splitmix64: fixed seed, so both ends of a connection agree without exchanging it.
    let mut state: u64 = 0x5056_4e45_5450_4631; // "PVNETPF1"
    for chunk in t[..PERIOD].chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let bytes = z.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
    let (a, b) = t.split_at_mut(PERIOD);
    b.copy_from_slice(a);
    t.into_boxed_slice()
}

/// The pattern byte at absolute stream offset `offset`.
pub fn byte_at(offset: u64) -> u8 {
    table()[(offset % PERIOD as u64) as usize]
}

/// The pattern as one contiguous slice of `len` bytes starting at `offset % PERIOD`, usable
/// as a zero-copy send source when `len <= PERIOD`.
///
/// # Panics
/// If `len > PERIOD`.
pub fn slice_at(offset: u64, len: usize) -> &'static [u8] {
    assert!(len <= PERIOD, "pattern slice longer than one period");
    let pos = (offset % PERIOD as u64) as usize;
    &table()[pos..pos + len]
}

/// Fill `buf` with the pattern bytes for stream offsets `offset .. offset + buf.len()`.
pub fn fill(offset: u64, buf: &mut [u8]) {
    let t = table();
    let mut pos = (offset % PERIOD as u64) as usize;
    for chunk in buf.chunks_mut(PERIOD) {
        let n = chunk.len();
        chunk.copy_from_slice(&t[pos..pos + n]);
        pos = (pos + n) % PERIOD;
    }
}

/// Number of bytes of `buf` that differ from the pattern at stream offsets
/// `offset .. offset + buf.len()`. Zero means the data is exactly the pattern.
pub fn verify(offset: u64, buf: &[u8]) -> u64 {
    let t = table();
    let mut pos = (offset % PERIOD as u64) as usize;
    let mut bad = 0u64;
    for chunk in buf.chunks(PERIOD) {
        let n = chunk.len();
        let want = &t[pos..pos + n];
        if chunk != want {
            bad += count_mismatches(chunk, want);
        }
        pos = (pos + n) % PERIOD;
    }
    bad
}

/// Slow path: compare in 64-byte blocks, count bytes only inside differing blocks.
fn count_mismatches(got: &[u8], want: &[u8]) -> u64 {
    got.chunks(64)
        .zip(want.chunks(64))
        .filter(|(g, w)| g != w)
        .map(|(g, w)| g.iter().zip(w.iter()).filter(|(a, b)| a != b).count() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memfd holding `bytes`, sealed with `seals`.
    fn memfd_with(bytes: &[u8], seals: SealFlag) -> OwnedFd {
        sealed_memfd("t", bytes, seals).unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals and file mappings: not in Miri")]
    fn shared_memfd_maps_as_the_table_and_cannot_be_written() {
        let fd = shared_memfd().unwrap();
        let t = map_shared(fd.as_fd()).unwrap();
        assert_eq!(t, &*generate());
        assert_eq!(t, table());
        let mut f = std::fs::File::from(fd.try_clone().unwrap());
        let e = io::Write::write_all(&mut f, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
        // Its number, as a child would get it, is accepted too.
        let t2 = table_from_fd_number(&fd.as_raw_fd().to_string()).unwrap();
        assert_eq!(t2, &*generate());
    }

    #[test]
    #[cfg_attr(miri, ignore = "needs memfd, seals and file mappings: not in Miri")]
    fn map_shared_refuses_what_is_not_the_sealed_table() {
        let sealed = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        let good = generate();
        let unsealed = memfd_with(&good, SealFlag::empty());
        let e = map_shared(unsealed.as_fd()).unwrap_err();
        assert!(e.contains("not sealed"), "{e}");
        let mut bad = good.to_vec();
        bad[PERIOD + 7] ^= 1;
        let wrong = memfd_with(&bad, sealed);
        let e = map_shared(wrong.as_fd()).unwrap_err();
        assert!(e.contains("not the pattern"), "{e}");
        let short = memfd_with(&good[..PERIOD], sealed);
        let e = map_shared(short.as_fd()).unwrap_err();
        assert!(e.contains(&format!("{PERIOD} bytes")), "{e}");
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(map_shared(file.as_fd()).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls fcntl: not in Miri")]
    fn fd_numbers_that_name_nothing_are_refused() {
        for v in ["", "x", "-1", "3.5"] {
            let e = table_from_fd_number(v).unwrap_err();
            assert!(e.contains("not a descriptor number"), "{v}: {e}");
        }
        let e = table_from_fd_number("1000000").unwrap_err();
        assert!(e.contains("is not open"), "{e}");
    }

    fn naive(offset: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| byte_at(offset + i)).collect()
    }

    #[test]
    fn table_is_periodic_and_not_trivially_so() {
        let t = table();
        assert_eq!(t.len(), 2 * PERIOD);
        assert_eq!(&t[..PERIOD], &t[PERIOD..]);
        // No short shift should make the pattern match itself.
        for shift in [1usize, 2, 4, 8, 64, 1448, 4096, 65536 - PERIOD + 1] {
            let same = (0..PERIOD)
                .filter(|&i| t[i] == t[i + shift % PERIOD])
                .count();
            assert!(same < PERIOD / 100, "shift {shift}: {same} equal bytes");
        }
    }

    #[test]
    fn fill_matches_naive_at_arbitrary_offsets() {
        for &(off, len) in &[
            (0u64, 0usize),
            (0, 1),
            (3, 100),
            (PERIOD as u64 - 5, 20),
            (PERIOD as u64 * 7 + 11, 3 * PERIOD + 17),
            (u64::MAX - 300_000, 200_000),
            (123_456_789, 65536),
        ] {
            let mut b = vec![0u8; len];
            fill(off, &mut b);
            assert_eq!(b, naive(off, len), "off {off} len {len}");
            assert_eq!(verify(off, &b), 0);
            if len <= PERIOD {
                assert_eq!(slice_at(off, len), &b[..]);
            }
        }
    }

    #[test]
    fn verify_at_arbitrary_split_points() {
        let base = 987_654_321u64;
        let mut b = vec![0u8; 300_000];
        fill(base, &mut b);
        for split in [
            0usize,
            1,
            7,
            4093,
            PERIOD,
            PERIOD + 1,
            131_071,
            299_999,
            300_000,
        ] {
            let (x, y) = b.split_at(split);
            assert_eq!(verify(base, x), 0);
            assert_eq!(verify(base + split as u64, y), 0);
            // Wrong offset for the second part is detected.
            if !y.is_empty() {
                assert!(verify(base + split as u64 + 1, y) > 0 || y.len() < 4);
            }
        }
        // Fill in pieces equals fill at once.
        let mut c = vec![0u8; 300_000];
        let mut off = 0;
        for piece in [1usize, 2, 1000, 65521, 70000, 12345] {
            fill(base + off as u64, &mut c[off..off + piece]);
            off += piece;
        }
        fill(base + off as u64, &mut c[off..]);
        assert_eq!(b, c);
    }

    #[test]
    fn flipped_byte_detected() {
        let mut b = vec![0u8; 200_000];
        fill(42, &mut b);
        b[150_000] ^= 0x01;
        assert_eq!(verify(42, &b), 1);
        b[3] ^= 0xff;
        b[199_999] = b[199_999].wrapping_add(1);
        assert_eq!(verify(42, &b), 3);
    }

    #[test]
    fn dropped_chunk_detected() {
        let seg = 1448usize;
        let mut b = vec![0u8; 100 * seg];
        fill(0, &mut b);
        // Drop segment 10: everything after it is shifted.
        let mut dropped = b[..10 * seg].to_vec();
        dropped.extend_from_slice(&b[11 * seg..]);
        let bad = verify(0, &dropped);
        assert!(bad > (89 * seg) as u64 / 2, "bad {bad}");
        // Drop a full 64 KiB chunk (not a multiple of the period).
        let mut big = vec![0u8; 4 << 20];
        fill(0, &mut big);
        let mut d = big[..1 << 20].to_vec();
        d.extend_from_slice(&big[(1 << 20) + 65536..]);
        assert!(verify(0, &d) > 0);
    }

    #[test]
    fn duplicated_chunk_detected() {
        let seg = 4096usize;
        let mut b = vec![0u8; 50 * seg];
        fill(7, &mut b);
        let mut dup = b[..20 * seg].to_vec();
        dup.extend_from_slice(&b[19 * seg..20 * seg]); // segment 19 twice
        dup.extend_from_slice(&b[20 * seg..]);
        assert!(verify(7, &dup) > 0);
        // Reordered (swapped) segments are detected too.
        let mut sw = b.clone();
        sw[5 * seg..6 * seg].copy_from_slice(&b[6 * seg..7 * seg]);
        sw[6 * seg..7 * seg].copy_from_slice(&b[5 * seg..6 * seg]);
        assert!(verify(7, &sw) > seg as u64);
    }
}
