//! Progress bars (on stderr), shown only when stdout is a terminal and `--quiet` is not set;
//! lines printed through [`Output`] go above a visible bar.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::{CliError, CliResult};

/// Where a command prints, and whether it shows progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    show: bool,
}

impl Output {
    pub(crate) fn new(quiet: bool) -> Self {
        Output {
            show: !quiet && std::io::stdout().is_terminal(),
        }
    }

    /// A bar over `len` units of `unit` (e.g. "bytes" for a byte count).
    pub(crate) fn bar(&self, len: u64, bytes: bool) -> ProgressBar {
        if !self.show {
            return ProgressBar::hidden();
        }
        let template = if bytes {
            "{spinner} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}"
        } else {
            "{spinner} [{bar:30}] {pos}/{len} {msg}"
        };
        let bar = ProgressBar::new(len);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    }

    /// A spinner for work of unknown length.
    pub(crate) fn spinner(&self, msg: &'static str) -> ProgressBar {
        if !self.show {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new_spinner().with_message(msg);
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    }
}

/// Writes a line to stdout. A closed pipe (`strata log | head`) is [`CliError::BrokenPipe`],
/// not a panic as with `println!`.
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => CliError::BrokenPipe,
            _ => CliError::Io {
                path: "<stdout>".into(),
                source: e,
            },
        })
}

/// Prints a line above `bar` (or plainly when it is hidden).
pub(crate) fn line(bar: &ProgressBar, text: impl AsRef<str>) -> CliResult {
    bar.suspend(|| write_line(format_args!("{}", text.as_ref())))
}

/// Writes `warning: ...` to stderr: something that went wrong after a command's work was done
/// and committed (a compaction after a commit), which does not change its exit status.
pub(crate) fn warn(args: std::fmt::Arguments<'_>) {
    // Nothing to do if stderr is closed: the command's result stands either way.
    let _ = writeln!(std::io::stderr().lock(), "warning: {args}");
}
