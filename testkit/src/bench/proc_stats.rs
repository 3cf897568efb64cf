//! CPU time and memory of a child process, read from `/proc/<pid>/stat` and
//! `/proc/<pid>/status` (Linux).

/// CPU and memory of one process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcStats {
    /// User plus system CPU seconds since the process started.
    pub(crate) cpu_seconds: f64,
    /// Peak resident set size (`VmHWM`), MiB.
    pub(crate) peak_rss_mib: f64,
    /// Resident set size now (`VmRSS`), MiB.
    pub(crate) rss_mib: f64,
}

/// Reads the statistics of process `pid`; `None` when it is gone or unreadable.
pub(crate) fn read(pid: u32) -> Option<ProcStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    Some(ProcStats {
        cpu_seconds: cpu_ticks(&stat)? as f64 / ticks,
        peak_rss_mib: status_kib(&status, "VmHWM:").unwrap_or(0) as f64 / 1024.0,
        rss_mib: status_kib(&status, "VmRSS:").unwrap_or(0) as f64 / 1024.0,
    })
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field
/// 2) may contain spaces and parentheses, so fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The kB value of `key` in `/proc/<pid>/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_count_after_a_command_name_with_spaces() {
        let stat = "42 (kube apiserver) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn own_process_has_cpu_and_memory() {
        let own = read(std::process::id()).unwrap();
        assert!(own.peak_rss_mib > 0.0 && own.rss_mib > 0.0);
        assert!(own.peak_rss_mib >= own.rss_mib);
        assert_eq!(status_kib("VmHWM:\t  2048 kB\n", "VmHWM:"), Some(2048));
    }
}
