//! Per-thread scratch buffers of the encoder and decoder.
//!
//! A block's planes take a few MB of scratch. Fresh allocations of that size come from
//! the operating system, zeroed page by page on first touch, which cost a third of the
//! time of encoding a bf16 block; these buffers are reused instead.

use std::cell::RefCell;

/// Buffers larger than this (16 MiB) are not kept between calls, so that one large block
/// does not pin its memory to the thread.
const KEEP: usize = 16 << 20;

/// Reusable buffers. Their contents are left over from earlier calls: users write what
/// they read.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    bytes: Vec<u8>,
    words: Vec<u16>,
    /// rANS decode tables.
    pub(crate) table: Vec<u32>,
}

impl Scratch {
    /// `len` bytes and `words` 16-bit words, contents unspecified.
    pub(crate) fn get(&mut self, len: usize, words: usize) -> (&mut [u8], &mut [u16]) {
        if self.bytes.len() < len {
            self.bytes.resize(len, 0);
        }
        if self.words.len() < words {
            self.words.resize(words, 0);
        }
        (&mut self.bytes[..len], &mut self.words[..words])
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch buffers (a nested call gets empty ones).
pub(crate) fn with<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut s = SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let r = f(&mut s);
    if s.bytes.len() > KEEP {
        s.bytes = Vec::new();
    }
    if s.words.len() * 2 > KEEP {
        s.words = Vec::new();
    }
    if s.table.len() * 4 > KEEP {
        s.table = Vec::new();
    }
    SCRATCH.with(|c| *c.borrow_mut() = s);
    r
}
