//! What a result was measured on and with: kernel, CPU, TSC rate, the source revision, the time.

use serde_json::{json, Value};

/// The git commit the binary was built from (`build.rs`), or "unknown" outside a checkout.
pub const REVISION: &str = env!("PVNET_REVISION");

/// Kernel, CPU model, CPUs, TSC rate, memory, whether it is a virtual machine, and the default TCP
/// congestion control.
pub fn describe(tsc_hz: u64) -> Value {
    let uts = nix::sys::utsname::uname().ok();
    let s = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    json!({
        "kernel": s(|u| u.release()),
        "kernel_version": s(|u| u.version()),
        "arch": s(|u| u.machine()),
        "cpu_model": field("model name").unwrap_or_else(|| "unknown".into()),
        "cpus": pvnet_testbed::cpu::nr_cpus(),
        "tsc_hz": tsc_hz,
        "virtualized": field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor")),
        "memory_kib": mem_kib,
        "tcp_congestion_control": tcp_congestion_control(),
    })
}

/// The kernel's default TCP congestion control: new network namespaces inherit it, so it is
/// the one the remote host's senders use. It moves the results (on the machine of
/// docs/guest-scaling.md, CUBIC instead of BBR took `xen`'s eight-guest ratio from 0.82 to 0.86
/// by slowing one guest), so the report names it.
fn tcp_congestion_control() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a Unix time, and a compact form for directory names.
pub fn utc(unix: u64) -> (String, String) {
    let (days, secs) = (unix / 86400, unix % 86400);
    // Civil from days (H. Hinnant's algorithm), for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    (
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}"),
        format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0).0, "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400).0, "2000-02-29 00:00:00");
        assert_eq!(utc(1_767_225_599).1, "20251231-235959");
    }

    #[test]
    fn describes_this_machine() {
        let m = describe(1_000_000_000);
        assert!(m["cpus"].as_u64().unwrap() >= 1);
        assert!(!m["kernel"].as_str().unwrap().is_empty());
        assert!(!REVISION.is_empty());
        let cc = m["tcp_congestion_control"].as_str().unwrap();
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
        assert!(
            available.split_whitespace().any(|a| a == cc),
            "{cc} not in {available}"
        );
    }
}
