//! One testbed per measurement: started for a configuration, torn down whatever happened.

use anyhow::{Context, Result};

use super::interrupt;
use super::progress::Progress;
use crate::config::DaemonConfig;
use crate::lifecycle;
use crate::rundir::RunInfo;

/// Starts the testbed of `cfg` (configuration `config`, for messages), runs `f` on it unless
/// the bench was interrupted, and tears it down. `f`'s error comes first, then teardown's.
pub fn with_testbed<T>(
    cfg: &DaemonConfig,
    config: &str,
    progress: &Progress,
    f: impl FnOnce(&RunInfo) -> Result<T>,
) -> Result<(T, RunInfo)> {
    let info = lifecycle::start_daemon(cfg, false).map_err(|e| explain_start_error(e, config))?;
    let res = interrupt::check()
        .map_err(anyhow::Error::from)
        .and_then(|()| f(&info));
    progress.phase("tearing the testbed down", 0.0);
    let down = lifecycle::down(&info.id).context("tearing the testbed down");
    let t = res?;
    down?;
    Ok((t, info))
}

/// Adds a hint to a testbed that failed to start.
pub fn explain_start_error(e: anyhow::Error, config: &str) -> anyhow::Error {
    let text = format!("{e:#}");
    let hint = if text.contains("already exists") || text.contains("File exists") {
        " (a namespace or link of that name is already in use: a stale run? `pvnet down --all` removes runs)"
    } else if text.contains("not supported") || text.contains("No such device") {
        " (a kernel feature is missing: the testbed needs network namespaces, veth, TUN/TAP and AF_PACKET: CONFIG_NET_NS, CONFIG_VETH, CONFIG_TUN, CONFIG_PACKET)"
    } else if text.contains("Address already in use") {
        " (an address or port is already in use)"
    } else {
        ""
    };
    e.context(format!(
        "configuration {config}: the testbed did not start{hint}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_errors_get_a_hint() {
        let e = |m: &str| format!("{:#}", explain_start_error(anyhow::anyhow!("{m}"), "xen"));
        let s = e("the daemon exited: namespace pvnet-abc123-dd already exists");
        assert!(
            s.starts_with("configuration xen: the testbed did not start"),
            "{s}"
        );
        assert!(
            s.contains("already in use") && s.contains("pvnet down --all"),
            "{s}"
        );
        let s = e("creating veth pair a <-> b: Operation not supported (os error 95)");
        assert!(
            s.contains("kernel feature is missing") && s.contains("CONFIG_VETH"),
            "{s}"
        );
        assert!(e("bind: Address already in use").contains("port is already in use"));
        assert!(e("something else").ends_with("something else"));
    }
}
