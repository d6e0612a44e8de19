//! A redb [`StorageBackend`] over an in-memory "disk" that injects I/O faults and simulates
//! power loss, after SQLite's test VFS.
//!
//! The disk keeps two images: `durable`, what survived the last completed `sync_data`, and
//! `current`, what reads see (durable plus every write and `set_len` since). Each write and
//! `set_len` since the last completed sync is also kept in a log, so that a power loss can
//! keep any subset of them.
//!
//! **Counting** is per kind of call: reads, writes, `set_len`s and `sync_data`s each have
//! their own counter, from 0, reset by [`FaultDisk::arm`]. A fault names a kind and an index:
//! "the 3rd write" is `(Kind::Write, 3)`. `len` and `close` are neither counted nor faulted.
//!
//! **Faults** fire once (a transient error): the call fails and later calls succeed, except
//! for [`Fault::DiskFull`], after which writes fail with ENOSPC (the disk stays full), and a
//! power loss, after which every call fails (the machine is off) until the test takes the
//! surviving bytes with [`FaultDisk::power_off`] and opens a new disk on them.
//!
//! **Power loss** keeps, of the writes since the last completed sync: none
//! ([`Loss::DropAll`]), all ([`Loss::KeepAll`]), or a seeded random subset
//! ([`Loss::KeepSome`]): each logged write or `set_len` is dropped, kept, or (a write longer
//! than one 4 KiB block) torn, keeping a random whole number of its leading 4 KiB blocks. The
//! kept ones are applied to the durable image in their original order.

#![allow(unreachable_pub)]

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use strata_store::redb::StorageBackend;

/// A kind of backend call that is counted and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `read`.
    Read,
    /// `write`.
    Write,
    /// `set_len`.
    SetLen,
    /// `sync_data`.
    Sync,
}

impl Kind {
    /// Every kind, in counter order.
    pub const ALL: [Kind; 4] = [Kind::Read, Kind::Write, Kind::SetLen, Kind::Sync];

    fn index(self) -> usize {
        match self {
            Kind::Read => 0,
            Kind::Write => 1,
            Kind::SetLen => 2,
            Kind::Sync => 3,
        }
    }
}

/// What survives a power loss of the writes since the last completed sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// None of them.
    DropAll,
    /// All of them.
    KeepAll,
    /// A random subset (some torn at 4 KiB boundaries), from this seed.
    KeepSome(u64),
}

/// What happens at the armed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with EIO and changes nothing.
    Eio,
    /// The call fails with ENOSPC and changes nothing.
    Enospc,
    /// A write stores the first half of its data, then fails with ENOSPC (a short write
    /// followed by a full disk); later calls succeed (space was freed meanwhile).
    ShortEnospc,
    /// The disk is full from this call on, until the power goes off: a write stores the first
    /// half of its data and fails with ENOSPC, and so does every later write (storing
    /// nothing) and every `set_len` that grows the storage; a `set_len` here fails with ENOSPC.
    DiskFull,
    /// The power goes off before the call: it fails with EIO, and so does every later call.
    PowerLoss(Loss),
}

/// A logged change since the last completed sync.
#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Disk {
    durable: Vec<u8>,
    current: Vec<u8>,
    log: Vec<Op>,
    counts: [u64; 4],
    armed: Option<(Kind, u64, Fault)>,
    fired: Option<(Kind, u64, Fault)>,
    /// Set at a power loss: the bytes that survived it.
    survivor: Option<Vec<u8>>,
    /// Set by [`Fault::DiskFull`].
    full: bool,
}

/// The shared handle of a faulty disk: give a clone to [`strata_store::Store::open_with_backend`]
/// and keep one to arm faults and take the surviving bytes.
#[derive(Debug, Clone, Default)]
pub struct FaultDisk(Arc<Mutex<Disk>>);

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

/// xorshift64*: a small seeded generator for the power-loss subsets.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(offset, data) => {
            let start = usize::try_from(*offset).expect("offset fits in memory");
            let end = start + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[start..end].copy_from_slice(data);
        }
        Op::SetLen(len) => image.resize(usize::try_from(*len).expect("length fits"), 0),
    }
}

impl Disk {
    /// The bytes that survive a power loss now.
    fn surviving(&self, loss: Loss) -> Vec<u8> {
        let mut image = self.durable.clone();
        match loss {
            Loss::DropAll => {}
            Loss::KeepAll => self.log.iter().for_each(|op| apply(&mut image, op)),
            Loss::KeepSome(seed) => {
                let mut rng = Rng::new(seed);
                for op in &self.log {
                    match (rng.below(3), op) {
                        (0, _) => {}
                        (2, Op::Write(offset, data)) if data.len() > 4096 => {
                            let blocks = rng.below((data.len() / 4096) as u64) as usize;
                            let torn = Op::Write(*offset, data[..blocks * 4096].to_vec());
                            apply(&mut image, &torn);
                        }
                        _ => apply(&mut image, op),
                    }
                }
            }
        }
        image
    }

    /// Counts a call of `kind` and says which fault, if any, it meets.
    fn enter(&mut self, kind: Kind) -> Option<Fault> {
        if self.survivor.is_some() {
            return Some(Fault::Eio);
        }
        let n = self.counts[kind.index()];
        self.counts[kind.index()] += 1;
        match self.armed {
            Some((k, at, fault)) if k == kind && at == n => {
                self.armed = None;
                self.fired = Some((k, at, fault));
                match fault {
                    Fault::PowerLoss(loss) => self.survivor = Some(self.surviving(loss)),
                    Fault::DiskFull => self.full = true,
                    _ => {}
                }
                Some(fault)
            }
            _ => None,
        }
    }
}

impl FaultDisk {
    /// An empty disk.
    pub fn new() -> FaultDisk {
        FaultDisk::default()
    }

    /// A disk holding `bytes`, all durable.
    pub fn with_bytes(bytes: Vec<u8>) -> FaultDisk {
        let disk = Disk {
            durable: bytes.clone(),
            current: bytes,
            ..Disk::default()
        };
        FaultDisk(Arc::new(Mutex::new(disk)))
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        // A panic while locked is a test failure reported elsewhere; the data is still usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Resets the counters and arms `fault` at call `at` of `kind` (or nothing).
    pub fn arm(&self, fault: Option<(Kind, u64, Fault)>) {
        let mut d = self.lock();
        d.counts = [0; 4];
        d.armed = fault;
        d.fired = None;
    }

    /// Calls counted since [`FaultDisk::arm`], by kind.
    pub fn counts(&self) -> [u64; 4] {
        self.lock().counts
    }

    /// The fault that fired since [`FaultDisk::arm`], if any.
    pub fn fired(&self) -> Option<(Kind, u64, Fault)> {
        self.lock().fired
    }

    /// The power goes off now (if it is not off already): every later call fails. Returns the
    /// bytes that survive: those of the power loss that already happened, or of `loss` now.
    pub fn power_off(&self, loss: Loss) -> Vec<u8> {
        let mut d = self.lock();
        if d.survivor.is_none() {
            let s = d.surviving(loss);
            d.survivor = Some(s);
        }
        d.survivor.clone().expect("set above")
    }

    /// Everything written, as after a clean shutdown (the power stays on).
    pub fn current(&self) -> Vec<u8> {
        self.lock().current.clone()
    }
}

impl StorageBackend for FaultDisk {
    fn len(&self) -> io::Result<u64> {
        let d = self.lock();
        if d.survivor.is_some() {
            return Err(eio());
        }
        Ok(d.current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut d = self.lock();
        match d.enter(Kind::Read) {
            None => {}
            Some(Fault::Enospc) => return Err(enospc()),
            Some(_) => return Err(eio()),
        }
        let start = usize::try_from(offset).map_err(|_| eio())?;
        let end = start + out.len();
        if end > d.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read {start}..{end} past the end {}", d.current.len()),
            ));
        }
        out.copy_from_slice(&d.current[start..end]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut d = self.lock();
        match d.enter(Kind::SetLen) {
            None if d.full && len > d.current.len() as u64 => return Err(enospc()),
            None => {}
            Some(Fault::Enospc | Fault::ShortEnospc | Fault::DiskFull) => return Err(enospc()),
            Some(_) => return Err(eio()),
        }
        let op = Op::SetLen(len);
        apply(&mut d.current, &op);
        d.log.push(op);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut d = self.lock();
        match d.enter(Kind::Sync) {
            None => {}
            Some(Fault::Enospc) => return Err(enospc()),
            Some(_) => return Err(eio()),
        }
        d.durable = d.current.clone();
        d.log.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut d = self.lock();
        let (data, result) = match d.enter(Kind::Write) {
            None if d.full => return Err(enospc()),
            None => (data, Ok(())),
            Some(Fault::ShortEnospc | Fault::DiskFull) => (&data[..data.len() / 2], Err(enospc())),
            Some(Fault::Enospc) => return Err(enospc()),
            Some(_) => return Err(eio()),
        };
        let op = Op::Write(offset, data.to_vec());
        apply(&mut d.current, &op);
        d.log.push(op);
        result
    }
}
