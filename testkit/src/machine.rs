//! The machine a benchmark ran on and the memory it used, for the figures it prints.

/// This process's peak resident memory (VmHWM), in bytes; `None` where `/proc` has no
/// such line (not Linux).
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The CPU's model name (from `/proc/cpuinfo`, or "unknown CPU").
pub fn cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// "CPU, N cores".
pub fn machine() -> String {
    format!("{}, {} cores", cpu(), cores())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_machine() {
        assert!(machine().ends_with(&format!("{} cores", cores())));
        assert!(cores() >= 1);
        if cfg!(target_os = "linux") {
            assert!(peak_rss().is_some_and(|b| b > 0));
        }
    }
}
