//! One persistent thread pool for every op of the fast CPU backend.
//!
//! The calling thread is worker 0 and runs its share of each job; the others
//! wait between jobs by spinning for a short while (the next op of a token
//! comes within microseconds) and then sleep on a condition variable, so an
//! idle session costs no CPU.
//!
//! Work is handed out in chunks on demand, and the caller does not wait for
//! workers that have not started: once it has taken the last chunk it closes
//! the job, and a worker that wakes late (the OS gave its core to someone
//! else) finds it closed and goes back to waiting. The caller waits only for
//! workers inside the job, so one descheduled thread does not stall every op
//! of a shared machine.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(200);

/// The job gate: `epoch << 32 | CLOSED | workers inside`.
const CLOSED: u64 = 1 << 31;
const INSIDE: u64 = CLOSED - 1;

fn epoch_of(gate: u64) -> u32 {
    (gate >> 32) as u32
}

/// A job with its lifetime erased; see the SAFETY notes where it is made
/// and used.
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn(usize) + Sync));

struct Shared {
    /// Which job is current, whether it still admits workers, and how many
    /// are inside it.
    gate: AtomicU64,
    /// The current job, written by the caller only while the gate is closed
    /// with nobody inside, read by workers only once inside.
    job: UnsafeCell<Option<JobRef>>,
    stop: AtomicBool,
    panicked: AtomicBool,
    /// Workers asleep or about to sleep; the caller wakes them only if any.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is the only non-Sync field. It is written only by the thread
// that owns the pool, inside `run`, while the gate is closed and nobody is
// inside (so no worker reads it), before the Release store that opens the
// gate; workers read it only after entering through the gate (an AcqRel
// compare-exchange that saw it open), and the caller does not return before
// every worker that entered has left. The closure it points to is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced under that
// protocol.
unsafe impl Send for Shared {}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    /// A pool of `n_threads` (at least 1), counting the caller.
    pub fn new(n_threads: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            gate: AtomicU64::new(CLOSED),
            job: UnsafeCell::new(None),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut pool = Self {
            shared,
            workers: Vec::new(),
        };
        for index in 1..n_threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            // On failure, dropping `pool` stops the workers made so far.
            pool.workers.push(
                std::thread::Builder::new()
                    .name(format!("smelt-cpu-{index}"))
                    .spawn(move || worker(&shared, index))?,
            );
        }
        Ok(pool)
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(thread_index)` on the caller and on whichever workers join
    /// before the caller's `f` returns; returns when all that joined are
    /// done. `f` must therefore share its work out itself (see
    /// [`ThreadPool::for_each`]).
    ///
    /// # Panics
    /// If `f` panicked on any thread.
    fn run(&mut self, f: &(dyn Fn(usize) + Sync)) {
        let s = &*self.shared;
        if self.workers.is_empty() {
            f(0);
            return;
        }
        // SAFETY: the lifetime is erased so workers can hold the job. They
        // use it only while inside the gate, and this function does not
        // return (or unwind: the caller's share runs under catch_unwind)
        // before the gate is closed with nobody inside.
        let job: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        // SAFETY: the gate is closed with nobody inside (the state the last
        // run left), so no worker reads `job` while it is written.
        unsafe { *s.job.get() = Some(JobRef(job)) };
        let epoch = epoch_of(s.gate.load(Relaxed)).wrapping_add(1);
        s.gate.store(u64::from(epoch) << 32, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        s.gate.fetch_or(CLOSED, AcqRel);
        let mut spins = 0u32;
        while s.gate.load(Acquire) & INSIDE != 0 {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                // A worker inside was descheduled: let it have the core.
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Relaxed) {
            panic!("a CPU worker thread panicked");
        }
    }

    /// Splits `0..n` into chunks of `chunk` handed out on demand (threads
    /// that finish early take more), calling `f(thread_index, range)`.
    pub fn for_each(&mut self, n: usize, chunk: usize, f: &(dyn Fn(usize, Range<usize>) + Sync)) {
        let chunk = chunk.max(1);
        if n <= chunk || self.workers.is_empty() {
            for start in (0..n).step_by(chunk) {
                f(0, start..(start + chunk).min(n));
            }
            return;
        }
        let next = AtomicUsize::new(0);
        self.run(&|t| {
            loop {
                let start = next.fetch_add(chunk, Relaxed);
                if start >= n {
                    break;
                }
                f(t, start..(start + chunk).min(n));
            }
        });
    }
}

fn worker(s: &Shared, index: usize) {
    let mut seen = 0u32;
    loop {
        // Wait for a new epoch: spin first, then sleep.
        let start = Instant::now();
        let mut spins = 0u32;
        let gate = loop {
            let gate = s.gate.load(Acquire);
            if epoch_of(gate) != seen || s.stop.load(Acquire) {
                break gate;
            }
            spins += 1;
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, SeqCst);
            // Re-check after announcing sleep: either the caller sees the
            // sleeper and notifies under the lock, or we see its new epoch.
            let guard = if epoch_of(s.gate.load(SeqCst)) == seen && !s.stop.load(SeqCst) {
                s.wake.wait(guard).unwrap_or_else(|e| e.into_inner())
            } else {
                guard
            };
            s.sleepers.fetch_sub(1, SeqCst);
            drop(guard);
            spins = 0;
        };
        if s.stop.load(Acquire) {
            return;
        }
        seen = epoch_of(gate);
        if !enter(s, seen) {
            continue;
        }
        // SAFETY: inside the gate, the job is set and stays alive until we
        // leave (see `Shared`).
        let job = unsafe { (*s.job.get()).expect("a job is set while the gate is open") };
        // SAFETY: see JobRef: the closure outlives this use.
        let f = unsafe { &*job.0 };
        if catch_unwind(AssertUnwindSafe(|| f(index))).is_err() {
            s.panicked.store(true, Relaxed);
        }
        s.gate.fetch_sub(1, Release);
    }
}

/// Joins job `epoch` if it is still the current one and open.
fn enter(s: &Shared, epoch: u32) -> bool {
    let mut gate = s.gate.load(Acquire);
    loop {
        if epoch_of(gate) != epoch || gate & CLOSED != 0 {
            return false;
        }
        match s
            .gate
            .compare_exchange_weak(gate, gate + 1, AcqRel, Acquire)
        {
            Ok(_) => return true,
            Err(now) => gate = now,
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, SeqCst);
        let epoch = epoch_of(s.gate.load(Relaxed)).wrapping_add(1);
        s.gate.store(u64::from(epoch) << 32 | CLOSED, SeqCst);
        {
            let _guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A mutable slice shared by the threads of one job, each writing its own
/// disjoint elements.
pub struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: threads only reach the data through `slice`, whose callers
// guarantee disjoint ranges; T: Send makes handing elements across threads
// sound.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        Self {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// `len` elements from `start`.
    ///
    /// # Safety
    /// No two live slices from the same `SharedMut` may overlap, and the
    /// slice it was made from must outlive them (it does for the duration
    /// of a pool job, which borrows it).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(
            start <= self.len && len <= self.len - start,
            "range outside the slice"
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's
        // promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}
