//! A child process whose stdout lines are collected while it runs, to be killed (SIGKILL)
//! at some moment or waited for: the crash tests start a writer this way, kill it, and
//! compare what it printed (what it had committed) with what the store holds.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A running child and the lines it printed so far.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: JoinHandle<()>,
}

/// How a child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Whether it was still running when it was killed (always `false` after a wait).
    pub killed: bool,
    /// Whether it exited with success (`false` when killed).
    pub success: bool,
    /// Every line it printed on stdout.
    pub lines: Vec<String>,
}

impl Spawned {
    /// Starts `cmd` with its stdout piped (and collected line by line) and its stderr
    /// dropped.
    ///
    /// # Panics
    /// If the process cannot be started.
    pub fn start(mut cmd: Command) -> Spawned {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let Some(out) = child.stdout.take() else {
            panic!("{cmd:?}: no stdout pipe");
        };
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        Spawned {
            child,
            lines,
            reader,
        }
    }

    /// Starts this test binary again running only the test `test` (`--exact`), with the
    /// environment variable `key` set to `value`: the test does the child's work when it
    /// sees the variable and nothing otherwise.
    ///
    /// # Panics
    /// If the test binary cannot be found or started.
    pub fn test_process(test: &str, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Spawned {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("test binary: {e}"));
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(key, value);
        Spawned::start(cmd)
    }

    /// The lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Kills the process (SIGKILL) unless it has ended, and reaps it.
    ///
    /// # Panics
    /// If the process cannot be killed or waited for.
    pub fn kill(mut self) -> Ended {
        let running = matches!(self.child.try_wait(), Ok(None));
        if running {
            self.child
                .kill()
                .unwrap_or_else(|e| panic!("cannot SIGKILL the child: {e}"));
        }
        let mut ended = self.wait();
        ended.killed = running;
        ended
    }

    /// Waits for the process to end.
    ///
    /// # Panics
    /// If the process cannot be waited for.
    pub fn wait(mut self) -> Ended {
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("cannot wait for the child: {e}"));
        let _ = self.reader.join();
        let lines = self.lines.lock().map(|l| l.clone()).unwrap_or_default();
        Ended {
            killed: false,
            success: status.success(),
            lines,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_lines_and_kills() {
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo one; echo two"]);
        let ended = Spawned::start(echo).wait();
        assert!(ended.success && !ended.killed);
        assert_eq!(ended.lines, ["one", "two"]);
        let mut sleeper = Command::new("sh");
        sleeper.args(["-c", "echo up; exec sleep 30"]);
        let s = Spawned::start(sleeper);
        let start = std::time::Instant::now();
        while s.lines().is_empty() && start.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ended = s.kill();
        assert!(ended.killed && !ended.success);
        assert_eq!(ended.lines, ["up"]);
    }
}
