//! Fuzzes the config reader for memory: every allocation is counted, and no input may make
//! the parse-and-check path (what the agent and `validate` run on a file) hold more than a
//! small multiple of its own size. Run with the alias-heavy dictionary (fuzz/dict/yaml-alias.dict)
//! so anchors, aliases and merge keys are tried in every shape. The highest peak per input byte
//! seen so far is printed when it grows.
#![no_main]

use ipmasq::config::{check_text, Options};
use libfuzzer_sys::fuzz_target;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The most bytes held for one input, and the highest bytes held per input byte for inputs of
/// at least [`RATIO_FROM`] bytes (below that the bound's fixed floor dominates), in hundredths.
static MOST_HELD: AtomicUsize = AtomicUsize::new(0);
static WORST_RATIO: AtomicUsize = AtomicUsize::new(0);
const RATIO_FROM: usize = 1024;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + (new_size - layout.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The bound: 40 bytes held per input byte (the tree budget is 32), plus 8 MiB.
fn allowance(len: usize) -> usize {
    40 * len + (8 << 20)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let checked = check_text(text, &Options::default());
    drop(checked);
    let used = PEAK.load(Ordering::Relaxed) - before;
    assert!(
        used <= allowance(text.len()),
        "{} input bytes held {used} bytes at the peak",
        text.len()
    );
    if used > MOST_HELD.fetch_max(used, Ordering::Relaxed) {
        eprintln!("most held: {used} bytes (input of {} bytes)", text.len());
    }
    if text.len() >= RATIO_FROM {
        let ratio = used * 100 / text.len();
        if ratio > WORST_RATIO.fetch_max(ratio, Ordering::Relaxed) {
            eprintln!(
                "peak per input byte: {:.2} ({used} bytes held for {} input bytes)",
                ratio as f64 / 100.0,
                text.len()
            );
        }
    }
});
