//! The binary's global allocator: mimalloc, with blocks of [`LARGE`] bytes and more
//! mapped straight from the OS (issue 17, memory after bursts of large bodies).
//!
//! mimalloc serves a freed multi-megabyte block back to its arena and gives the pages
//! to the OS only after its purge delay (1 s) *and* when some later allocation on the
//! owning thread runs its arena collection. After a burst of large request bodies the
//! worker threads often go quiet, so hundreds of megabytes could stay resident until
//! the next request (`benches/load/bodies.sh`: 212 MB ten seconds after one burst, 30 MB
//! after another, depending on which thread allocated last). A request body, its
//! parsed prompt and a large answer are such blocks; a mapping of their own is returned
//! by `munmap` the moment they are freed, and grows by `mremap` without a copy. The
//! cost, a system call and the page faults per block, is small beside copying a
//! megabyte; everything below [`LARGE`] (all of the request path's small buffers) stays
//! with mimalloc.
//!
//! Which allocator owns a block follows from its layout alone (size at least [`LARGE`],
//! alignment at most [`PAGE`]), which `dealloc` and `realloc` receive unchanged, so no
//! header or lookup is needed.
//!
//! # mimalloc's plain entry points
//! The `mimalloc` crate's allocator passes every layout to `mi_malloc_aligned`. In
//! mimalloc 3 that path serves a block from the free list of the size's own bin only
//! when one happens to be there; otherwise it takes the aligned generic path, which
//! uses the plain allocation only for power-of-two block sizes and **over-allocates**
//! every other size (`size + align - 1` bytes, so a 48-byte request takes a 64-byte
//! block) and marks the page as holding interior pointers. Under the JSON load that
//! was 13.7 of the 65 allocations of a request, 10.2 of them over-allocated
//! (`benches/load/callgrind.sh 8`, release build of `59e6394`). A layout whose
//! alignment is at most 16 (`MI_MAX_ALIGN_SIZE`) and whose size is a multiple of it
//! needs no aligned path: mimalloc's bins are multiples of 8 bytes (of 16 above 16)
//! and a page's first block is 16-aligned, the guarantee C's `malloc` gives for
//! `max_align_t`, so plain `mi_malloc`, `mi_zalloc` and `mi_realloc` serve it (the
//! rule `std`'s own allocator applies to `malloc`; the same fix is discussed in
//! purpleprotocol/mimalloc_rust#170). Other layouts keep the aligned calls.
#![allow(unsafe_code)] // A global allocator is `unsafe` by definition (see Cargo.toml's lints).

use std::alloc::{GlobalAlloc, Layout};

/// Smallest block mapped from the OS: 1 MiB.
pub const LARGE: usize = 1 << 20;

/// Largest alignment a mapping guarantees: the 4 KiB page.
pub const PAGE: usize = 4096;

/// mimalloc for small blocks, `mmap` for blocks of [`LARGE`] bytes and more.
pub struct Allocator;

/// Largest alignment every mimalloc block of a size that is a multiple of it has
/// (`MI_MAX_ALIGN_SIZE`, 16 bytes; see the module documentation).
const PLAIN_ALIGN: usize = 16;

/// Whether a mimalloc block for `size` bytes aligned to `align` may come from the
/// plain (unaligned) entry points.
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && size.is_multiple_of(align)
}

/// Whether a block of `layout` is mapped from the OS (on Linux, which has `mremap`;
/// elsewhere mimalloc serves every block).
fn mapped(layout: &Layout) -> bool {
    cfg!(target_os = "linux") && layout.size() >= LARGE && layout.align() <= PAGE
}

/// A new anonymous private mapping of `size` bytes (zeroed by the OS), or null.
#[cfg(target_os = "linux")]
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing
    // touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// The mapping of `old` bytes at `ptr` resized to `new` bytes, moved (contents kept)
/// when it cannot grow in place; null on failure (the old mapping then stays).
///
/// # Safety
/// `ptr` is a mapping of `old` bytes made by [`map`] or [`remap`].
#[cfg(target_os = "linux")]
unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
    // SAFETY: the caller's contract.
    let p = unsafe { libc::mremap(ptr.cast(), old, new, libc::MREMAP_MAYMOVE) };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Returns a mapping of `size` bytes at `ptr` to the OS.
///
/// # Safety
/// `ptr` is a mapping of `size` bytes made by [`map`] or [`remap`], not used after.
#[cfg(target_os = "linux")]
unsafe fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(ptr.cast(), size) };
}

#[cfg(not(target_os = "linux"))]
fn map(_size: usize) -> *mut u8 {
    unreachable!("blocks are mapped on Linux only")
}

#[cfg(not(target_os = "linux"))]
unsafe fn remap(_ptr: *mut u8, _old: usize, _new: usize) -> *mut u8 {
    unreachable!("blocks are mapped on Linux only")
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap(_ptr: *mut u8, _size: usize) {
    unreachable!("blocks are mapped on Linux only")
}

// SAFETY: every block is served whole by one allocator, chosen by `mapped(layout)`,
// and returned to the same one, since callers pass the block's own layout back.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            map(layout.size())
        } else if plain(layout.size(), layout.align()) {
            // SAFETY: a plain mimalloc block of a non-zero size; it is aligned to
            // `layout.align()` (module documentation).
            unsafe { libmimalloc_sys::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: the caller's contract for `layout`, passed on.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            map(layout.size()) // anonymous mappings are zero-filled
        } else if plain(layout.size(), layout.align()) {
            // SAFETY: as `alloc`'s plain block, zeroed.
            unsafe { libmimalloc_sys::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: as `alloc`.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(&layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map`.
            unsafe { unmap(ptr, layout.size()) };
        } else {
            // SAFETY: `ptr` came from mimalloc with this layout.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `layout.align()` and `new_size` form a layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(&layout), mapped(&new)) {
            (false, false) if plain(new_size, layout.align()) => {
                // SAFETY: a mimalloc block resized within mimalloc; the new block is
                // plain and so aligned as `layout` asks. mimalloc resizes and frees a
                // block by its page, whichever entry point allocated it.
                unsafe { libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast() }
            }
            (false, false) => {
                // SAFETY: a mimalloc block resized within mimalloc.
                unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
            }
            (true, true) => {
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes.
                unsafe { remap(ptr, layout.size(), new_size) }
            }
            _ => {
                // Across the threshold: a new block from the other allocator.
                // SAFETY: `new` is a valid layout of non-zero size (the old block's
                // size or the new one is at least LARGE, and new_size > 0 by contract).
                let p = unsafe { self.alloc(new) };
                if !p.is_null() {
                    // SAFETY: both blocks hold at least the smaller size and do not
                    // overlap; the old one is freed with its own layout.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                p
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `n` bytes at `p` with a pattern from `seed`.
    unsafe fn fill(p: *mut u8, n: usize, seed: u8) {
        for i in 0..n {
            unsafe { *p.add(i) = (i as u8).wrapping_mul(31).wrapping_add(seed) };
        }
    }

    /// Whether the first `n` bytes at `p` hold the pattern of `seed`.
    unsafe fn holds(p: *const u8, n: usize, seed: u8) -> bool {
        (0..n).all(|i| unsafe { *p.add(i) } == (i as u8).wrapping_mul(31).wrapping_add(seed))
    }

    #[test]
    fn every_small_block_is_aligned_as_its_layout_asks() {
        // Plain and aligned entry points, every alignment up to a page, sizes around
        // each bin boundary; each block written whole, then resized and checked.
        let a = Allocator;
        let mut live = Vec::new();
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in (1..=300).chain([
                1000,
                1024,
                4095,
                4096,
                5000,
                70_000,
                131_072,
                200_000,
                700_000,
                LARGE - 16,
            ]) {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                for zeroed in [false, true] {
                    let p = unsafe {
                        if zeroed {
                            a.alloc_zeroed(layout)
                        } else {
                            a.alloc(layout)
                        }
                    };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    if zeroed {
                        assert!((0..size).all(|i| unsafe { *p.add(i) } == 0));
                    }
                    unsafe { fill(p, size, size as u8) };
                    live.push((p, layout));
                }
            }
        }
        for (p, layout) in live {
            let size = layout.size();
            assert!(unsafe { holds(p, size, size as u8) });
            let grown = size * 3 + 8;
            let q = unsafe { a.realloc(p, layout, grown) };
            assert!(!q.is_null());
            assert_eq!(q as usize % layout.align(), 0);
            assert!(unsafe { holds(q, size, size as u8) });
            unsafe { a.dealloc(q, Layout::from_size_align(grown, layout.align()).unwrap()) };
        }
    }

    #[test]
    fn blocks_keep_their_contents_across_every_resize() {
        let a = Allocator;
        // small -> small -> large -> larger -> smaller large -> small
        let sizes = [100, 5000, LARGE + 7, 3 * LARGE, LARGE, 64];
        let mut layout = Layout::from_size_align(sizes[0], 8).unwrap();
        let mut p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        unsafe { fill(p, layout.size(), 3) };
        for &size in &sizes[1..] {
            let keep = layout.size().min(size);
            p = unsafe { a.realloc(p, layout, size) };
            assert!(!p.is_null(), "realloc to {size}");
            assert!(
                unsafe { holds(p, keep, 3) },
                "contents kept into {size} bytes"
            );
            layout = Layout::from_size_align(size, 8).unwrap();
            unsafe { fill(p, size, 3) };
        }
        unsafe { a.dealloc(p, layout) };
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn large_blocks_are_page_aligned_zeroed_and_writable() {
        let a = Allocator;
        let layout = Layout::from_size_align(2 * LARGE + 1, PAGE).unwrap();
        assert!(mapped(&layout));
        let p = unsafe { a.alloc_zeroed(layout) };
        assert!(!p.is_null());
        assert_eq!(p as usize % PAGE, 0);
        assert!((0..layout.size()).all(|i| unsafe { *p.add(i) } == 0));
        unsafe { fill(p, layout.size(), 9) };
        assert!(unsafe { holds(p, layout.size(), 9) });
        unsafe { a.dealloc(p, layout) };
    }

    #[test]
    fn page_aligned_blocks_keep_their_alignment_and_contents_across_the_threshold() {
        let a = Allocator;
        // small (mimalloc) -> exactly LARGE (mapped) -> LARGE - 1 (mimalloc) -> one
        // byte -> large again, every block page-aligned as its layout asks.
        let sizes = [PAGE, LARGE, LARGE - 1, 1, 5 * LARGE + 3];
        let mut layout = Layout::from_size_align(sizes[0], PAGE).unwrap();
        let mut p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        unsafe { fill(p, layout.size(), 5) };
        for &size in &sizes[1..] {
            let keep = layout.size().min(size);
            p = unsafe { a.realloc(p, layout, size) };
            assert!(!p.is_null(), "realloc to {size}");
            assert_eq!(p as usize % PAGE, 0, "{size} bytes page-aligned");
            assert!(unsafe { holds(p, keep, 5) }, "contents kept into {size}");
            layout = Layout::from_size_align(size, PAGE).unwrap();
            unsafe { fill(p, size, 5) };
        }
        unsafe { a.dealloc(p, layout) };
    }

    #[test]
    fn alignment_above_a_page_stays_with_mimalloc() {
        let a = Allocator;
        let layout = Layout::from_size_align(LARGE, 2 * PAGE).unwrap();
        assert!(!mapped(&layout));
        let p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        assert_eq!(p as usize % (2 * PAGE), 0);
        unsafe { a.dealloc(p, layout) };
    }
}
