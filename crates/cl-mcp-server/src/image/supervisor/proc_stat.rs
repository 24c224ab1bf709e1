//! What `/proc` says of the local image's process: threads' CPU time,
//! whether it is stopped, whether a thread waits opening a named pipe.

/// CPU time (user + system, in clock ticks) of each thread of `pid`.
pub(super) fn thread_cpu_ticks(pid: u32) -> Vec<(u32, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let tid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        // Fields after the command name: state is the 3rd field of the
        // whole line, utime the 14th and stime the 15th.
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let utime: u64 = rest.get(11)?.parse().ok()?;
        let stime: u64 = rest.get(12)?.parse().ok()?;
        Some((tid, utime + stime))
    })
    .collect()
}

/// Whether process `pid` is stopped (SIGSTOP, a debugger): state `T` or `t`
/// in `/proc/<pid>/stat`.
pub(super) fn process_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(matches!(after, 'T' | 't'))
        })
        .unwrap_or(false)
}

/// Whether a thread of `pid` sleeps in the kernel opening a named pipe
/// (`wait_for_partner` in `/proc/<pid>/task/<tid>/wchan`: the open of a
/// FIFO waiting for its other end).
pub(super) fn opening_a_pipe(pid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    dir.filter_map(|e| e.ok()).any(|e| {
        std::fs::read_to_string(e.path().join("wchan"))
            .is_ok_and(|w| w.trim() == "wait_for_partner")
    })
}
