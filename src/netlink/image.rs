//! The program's own mapped image: after the first sync the agent gives back the pages of its
//! executable's read-only segments (code, constants, the relocation table start-up read), so
//! what stays resident is what its steady passes run; and after a burst of decoding (a list of
//! the node's pods) the heap the C allocator kept.

use std::io;

/// The read-only `PT_LOAD` segments of the program (the first object `dl_iterate_phdr`
/// reports), as address ranges.
fn read_only_segments() -> Vec<std::ops::Range<usize>> {
    unsafe extern "C" fn program_only(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the Vec handed to dl_iterate_phdr below, alive for its call; the
        // loader's `info` and its headers are valid for the callback's duration.
        let (segments, info) =
            unsafe { (&mut *data.cast::<Vec<std::ops::Range<usize>>>(), &*info) };
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        for header in headers {
            if header.p_type == libc::PT_LOAD && header.p_flags & libc::PF_W == 0 {
                let start = info.dlpi_addr as usize + header.p_vaddr as usize;
                segments.push(start..start + header.p_memsz as usize);
            }
        }
        // The first object is the program itself: stop there.
        1
    }
    let mut segments: Vec<std::ops::Range<usize>> = Vec::new();
    // SAFETY: the callback only reads what the loader hands it and writes `segments`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(program_only),
            std::ptr::from_mut(&mut segments).cast::<libc::c_void>(),
        );
    }
    segments
}

/// Drops this process's mappings of the whole pages of its read-only segments
/// (`madvise(MADV_DONTNEED)`): the next use of one maps it again from the file, which the page
/// cache still holds. A writable segment is never touched: what relocation wrote there exists
/// only in this process. Returns the bytes released.
pub(crate) fn release_read_only_pages() -> io::Result<usize> {
    // SAFETY: sysconf reads a constant of the system.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(io::Error::last_os_error)?;
    let mut released = 0;
    for segment in read_only_segments() {
        let start = segment.start.next_multiple_of(page);
        let end = segment.end / page * page;
        if end <= start {
            continue;
        }
        // SAFETY: the range is whole pages of a read-only, file-backed mapping of the program,
        // never written: dropping them loses nothing, a later read maps the file's page again.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        released += end - start;
    }
    Ok(released)
}

/// Gives the free memory the C library's allocator keeps back to the kernel: glibc's keeps
/// what a burst freed (a list's answer decoded and dropped) in its arenas; musl's returns
/// large freed chunks by itself, so this does nothing there.
pub(crate) fn release_freed_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_backed_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssFile in /proc/self/status")
    }

    #[test]
    fn the_programs_read_only_pages_are_released_and_come_back_on_use() {
        let segments = read_only_segments();
        // Code and constants at least; every range inside this process's text or data.
        assert!(segments.len() >= 2, "{segments:x?}");
        let here = read_only_segments as *const () as usize;
        assert!(
            segments.iter().any(|s| s.contains(&here)),
            "this function's code at {here:#x} in none of {segments:x?}"
        );
        let before = file_backed_kib();
        let released = release_read_only_pages().unwrap();
        let after = file_backed_kib();
        assert!(released > 0);
        assert!(
            after < before,
            "RssFile {before} kB before, {after} kB after"
        );
        // The code runs on, mapped again from the file: the same answer as before.
        assert_eq!(read_only_segments(), segments);
    }
}
