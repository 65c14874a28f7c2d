//! A SQLite VFS for tests that can lose power: every write that no fsync has covered yet is
//! lost, exactly as on a disk whose volatile cache dies with the power.
//!
//! It wraps the platform's default VFS (unix). Writes go through to the real files at once, so
//! reads need no overlay; what the VFS keeps is an *undo log* per file: before a write or a
//! truncation changes bytes that the last `xSync` of that file made durable, it saves them. An
//! `xSync` empties the file's log (everything in it is now durable), as does [`sync_path`], the
//! store's own fsync of the WAL on a descriptor SQLite does not know. When the power is cut —
//! at a chosen operation, so that a seed picks the same point on every run — that operation
//! and every later write, truncation, sync or deletion fail with an I/O error, and
//! [`Disk::restore_synced`] later plays the logs backwards, leaving each file as its last sync
//! left it. The `-shm` file is not logged: it is never synced, and SQLite rebuilds it from the
//! WAL when the first connection opens the database.
//!
//! Only tests compile this module. SQLite's VFS interface is a C table of function pointers
//! reached through `rusqlite::ffi`, so implementing one takes `unsafe` code: the workspace denies
//! it everywhere else, and this test-only module is the one exception.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use rusqlite::ffi;

/// The name to open a connection with (`Connection::open_with_flags_and_vfs`).
pub(crate) const VFS_NAME: &str = "hookgate-power-cut";

/// When the power goes out: the operation that reaches the count fails, and everything after it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cut {
    /// At the n-th write, truncation or sync of any logged file, counted from [`Disk::arm`].
    AtOperation(u64),
    /// At the n-th write to the database file itself. In WAL mode only a checkpoint writes
    /// there, so this cuts the power in the middle of one.
    AtDatabaseWrite(u64),
    /// At the n-th sync of the WAL file: what was committed since the one before is then lost,
    /// and must not have been acknowledged.
    AtWalSync(u64),
    /// At the n-th operation after the first checkpoint's sync of the database file: among
    /// the writes that start the WAL over from its beginning, over frames already copied.
    AfterCheckpoint(u64),
}

/// A change to a logged file.
#[derive(Clone, Copy, PartialEq)]
enum Change {
    Write { database: bool },
    Truncate,
    Sync { database: bool },
}

/// The files under one folder, with their undo logs and the power switch.
pub(crate) struct Disk {
    dir: PathBuf,
    state: Mutex<DiskState>,
}

/// What a [`Disk`] saw, for a test to say what it covered.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DiskCounts {
    pub(crate) operations: u64,
    pub(crate) database_writes: u64,
    /// Syncs of the database file: one per checkpoint that wrote pages back.
    pub(crate) database_syncs: u64,
    pub(crate) wal_syncs: u64,
    /// Operations since the first sync of the database file.
    pub(crate) after_checkpoint: u64,
}

#[derive(Default)]
struct DiskState {
    powered_off: bool,
    /// A disk that acknowledges `fsync` without flushing: for showing that a test notices.
    ignores_syncs: bool,
    cut: Option<Cut>,
    counts: DiskCounts,
    unsynced: HashMap<PathBuf, UndoLog>,
}

/// The bytes a file had at its last sync, where they have been changed since.
struct UndoLog {
    size_at_sync: i64,
    /// `(offset, bytes before the change)`, in the order of the changes.
    saved: Vec<(i64, Vec<u8>)>,
}

impl Disk {
    /// Logs the files under `dir` from now on (the connections open them through [`VFS_NAME`]).
    pub(crate) fn attach(dir: &Path) -> Arc<Disk> {
        register_vfs();
        let disk = Arc::new(Disk {
            dir: dir.canonicalize().expect("the disk's folder exists"),
            state: Mutex::new(DiskState::default()),
        });
        let mut disks = disks().lock().expect("disk registry lock");
        disks.retain(|d| d.strong_count() > 0);
        disks.push(Arc::downgrade(&disk));
        disk
    }

    /// Cuts the power when `cut` is reached; the counts start again from zero.
    pub(crate) fn arm(&self, cut: Cut) {
        let mut state = self.lock();
        state.cut = Some(cut);
        state.counts = DiskCounts::default();
    }

    /// Makes `fsync` a no-op that reports success, as a disk with a lying write cache does.
    pub(crate) fn ignore_syncs(&self) {
        self.lock().ignores_syncs = true;
    }

    /// Cuts the power now, if the armed cut has not already.
    pub(crate) fn cut_now(&self) {
        self.lock().powered_off = true;
    }

    pub(crate) fn is_powered_off(&self) -> bool {
        self.lock().powered_off
    }

    pub(crate) fn counts(&self) -> DiskCounts {
        self.lock().counts
    }

    /// Once every connection to the files is closed: drops every write no sync covered and
    /// turns the power back on.
    pub(crate) fn restore_synced(&self) -> std::io::Result<()> {
        let mut state = self.lock();
        for (path, log) in state.unsynced.drain() {
            let file = match std::fs::OpenOptions::new().write(true).open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for (offset, bytes) in log.saved.iter().rev() {
                file.write_all_at(bytes, offset_u64(*offset))?;
            }
            file.set_len(offset_u64(log.size_at_sync))?;
        }
        state.powered_off = false;
        state.cut = None;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        self.state.lock().expect("disk state lock")
    }

    fn covering(path: &Path) -> Option<Arc<Disk>> {
        let disks = disks().lock().expect("disk registry lock");
        disks
            .iter()
            .filter_map(Weak::upgrade)
            .find(|disk| path.starts_with(&disk.dir))
    }
}

impl DiskState {
    /// Counts a write, truncation or sync and says whether it may reach the disk.
    fn may_change(&mut self, change: Change) -> bool {
        if self.powered_off {
            return false;
        }
        let counts = &mut self.counts;
        counts.operations += 1;
        if counts.database_syncs > 0 {
            counts.after_checkpoint += 1;
        }
        match change {
            Change::Write { database: true } => counts.database_writes += 1,
            Change::Sync { database: true } => counts.database_syncs += 1,
            Change::Sync { database: false } => counts.wal_syncs += 1,
            Change::Write { database: false } | Change::Truncate => {}
        }
        let reached = match self.cut {
            Some(Cut::AtOperation(n)) => counts.operations >= n,
            Some(Cut::AtDatabaseWrite(n)) => {
                change == Change::Write { database: true } && counts.database_writes >= n
            }
            Some(Cut::AtWalSync(n)) => change == Change::Sync { database: false } && counts.wal_syncs >= n,
            Some(Cut::AfterCheckpoint(n)) => counts.after_checkpoint >= n,
            None => false,
        };
        self.powered_off = reached;
        !reached
    }

    /// Saves what `[offset, end)` holds of the synced bytes before a change overwrites it.
    fn save_before_change(&mut self, file: &OpenFile, offset: i64, end: Option<i64>) {
        let log = self.unsynced.entry(file.path.clone()).or_insert_with(|| UndoLog {
            // SAFETY: `real` is the open file this `OpenFile` wraps.
            size_at_sync: unsafe { real_size(file.real()) },
            saved: Vec::new(),
        });
        let end = end.map_or(log.size_at_sync, |end| end.min(log.size_at_sync));
        if offset >= end {
            return;
        }
        let mut old = vec![0u8; usize::try_from(end - offset).expect("a write's length")];
        // SAFETY: as above; `old` has room for the bytes asked for. A short read fills the
        // rest with zeros, which a later restore overwrites or truncates away.
        unsafe {
            let methods = &*(*file.real()).pMethods;
            let read = methods.xRead.expect("xRead");
            read(file.real(), old.as_mut_ptr().cast(), c_int_len(old.len()), offset);
        }
        log.saved.push((offset, old));
    }
}

/// An fsync of `path` on a descriptor SQLite does not know (the writer's syncer): it makes
/// every write to the file so far durable, whoever wrote it, as an fsync does. It fails once
/// the power is off, and counts as an operation for the cut.
pub(crate) fn sync_path(path: &Path) -> std::io::Result<()> {
    let path = path.canonicalize()?;
    let Some(disk) = Disk::covering(&path) else {
        return Err(std::io::Error::other("the file is on no power-cut disk"));
    };
    let mut state = disk.lock();
    if !state.may_change(Change::Sync { database: false }) {
        return Err(std::io::Error::other("the power is off"));
    }
    if !state.ignores_syncs {
        state.unsynced.remove(&path);
    }
    Ok(())
}

fn offset_u64(offset: i64) -> u64 {
    u64::try_from(offset).expect("file offsets are not negative")
}

fn c_int_len(len: usize) -> c_int {
    c_int::try_from(len).expect("SQLite's writes fit in an int")
}

fn disks() -> &'static Mutex<Vec<Weak<Disk>>> {
    static DISKS: OnceLock<Mutex<Vec<Weak<Disk>>>> = OnceLock::new();
    DISKS.get_or_init(|| Mutex::new(Vec::new()))
}

/// A file opened through the VFS: SQLite's header first, as the C side expects.
#[repr(C)]
struct WrappedFile {
    base: ffi::sqlite3_file,
    open: *mut OpenFile,
}

struct OpenFile {
    /// The default VFS's file object, in 8-byte words for its alignment (a leaked box, freed
    /// on drop: SQLite writes to it through this pointer).
    real: std::ptr::NonNull<[u64]>,
    path: PathBuf,
    /// The disk whose undo log this file keeps, if it is a file worth keeping one for.
    disk: Option<Arc<Disk>>,
    is_database: bool,
}

impl OpenFile {
    fn new(path: PathBuf, words: usize, is_database: bool) -> OpenFile {
        let real = Box::into_raw(vec![0u64; words].into_boxed_slice());
        OpenFile {
            real: std::ptr::NonNull::new(real).expect("a box is never null"),
            path,
            disk: None,
            is_database,
        }
    }

    fn real(&self) -> *mut ffi::sqlite3_file {
        self.real.as_ptr().cast()
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        // SAFETY: `real` came from `Box::into_raw` in `new` and is freed only here.
        drop(unsafe { Box::from_raw(self.real.as_ptr()) });
    }
}

/// Registers the VFS once. Its table is leaked: SQLite keeps a pointer to it for the life of
/// the process.
fn register_vfs() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: plain calls into SQLite; the table and its name live for the process.
        unsafe {
            let real = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!real.is_null(), "SQLite has a default VFS");
            let name: &'static CStr = c"hookgate-power-cut";
            let size_of_file = std::mem::size_of::<WrappedFile>();
            let vfs = Box::into_raw(Box::new(ffi::sqlite3_vfs {
                iVersion: 2,
                szOsFile: c_int::try_from(size_of_file).expect("a small struct"),
                mxPathname: (*real).mxPathname,
                pNext: std::ptr::null_mut(),
                zName: name.as_ptr(),
                pAppData: real.cast(),
                xOpen: Some(vfs_open),
                xDelete: Some(vfs_delete),
                xAccess: Some(vfs_access),
                xFullPathname: Some(vfs_full_pathname),
                xDlOpen: None,
                xDlError: None,
                xDlSym: None,
                xDlClose: None,
                xRandomness: Some(vfs_randomness),
                xSleep: Some(vfs_sleep),
                xCurrentTime: Some(vfs_current_time),
                xGetLastError: Some(vfs_get_last_error),
                xCurrentTimeInt64: Some(vfs_current_time_int64),
                xSetSystemCall: None,
                xGetSystemCall: None,
                xNextSystemCall: None,
            }));
            let rc = ffi::sqlite3_vfs_register(vfs, 0);
            assert_eq!(rc, ffi::SQLITE_OK, "registering the power-cut VFS");
        }
    });
}

/// The default VFS this one wraps.
unsafe fn real_vfs(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY: `pAppData` was set to the default VFS at registration.
    unsafe { (*vfs).pAppData.cast() }
}

unsafe fn open_file<'a>(file: *mut ffi::sqlite3_file) -> &'a OpenFile {
    // SAFETY: SQLite passes back a file this VFS opened, whose `open` is set until xClose.
    unsafe { &*(*file.cast::<WrappedFile>()).open }
}

unsafe fn real_methods<'a>(file: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: an open real file has its methods.
    unsafe { &*(*file).pMethods }
}

unsafe fn real_size(real: *mut ffi::sqlite3_file) -> i64 {
    let mut size: i64 = 0;
    // SAFETY: `real` is an open file of the default VFS.
    unsafe {
        let file_size = real_methods(real).xFileSize.expect("xFileSize");
        if file_size(real, &mut size) != ffi::SQLITE_OK {
            size = 0;
        }
    }
    size
}

unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    if name.is_null() {
        return None;
    }
    // SAFETY: SQLite passes a NUL-terminated file name.
    let name = unsafe { CStr::from_ptr(name) };
    Some(PathBuf::from(name.to_str().ok()?))
}

unsafe extern "C" fn vfs_open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands over room for a `WrappedFile` (our szOsFile) and a valid name or
    // null; the real VFS gets room for its own file object.
    unsafe {
        let real_vfs = real_vfs(vfs);
        let words = usize::try_from((*real_vfs).szOsFile)
            .expect("a file size")
            .div_ceil(8);
        let path = path_of(name).unwrap_or_default();
        let logged =
            flags & (ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_WAL | ffi::SQLITE_OPEN_MAIN_JOURNAL) != 0;
        let mut open = Box::new(OpenFile::new(path, words, flags & ffi::SQLITE_OPEN_MAIN_DB != 0));
        let real_open = (*real_vfs).xOpen.expect("xOpen");
        let rc = real_open(real_vfs, name, open.real(), flags, out_flags);
        let wrapped = file.cast::<WrappedFile>();
        if rc != ffi::SQLITE_OK {
            (*wrapped).base.pMethods = std::ptr::null();
            return rc;
        }
        // The file exists now: its canonical path is the key `sync_path` finds it by.
        if let Ok(canonical) = open.path.canonicalize() {
            open.path = canonical;
        }
        if logged {
            open.disk = Disk::covering(&open.path);
        }
        (*wrapped).base.pMethods = &IO_METHODS;
        (*wrapped).open = Box::into_raw(open);
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn vfs_delete(vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    // SAFETY: forwarding SQLite's arguments to the default VFS.
    unsafe {
        let path = path_of(name).map(|p| p.canonicalize().unwrap_or(p));
        if let Some(path) = path
            && let Some(disk) = Disk::covering(&path)
        {
            let mut state = disk.lock();
            if state.powered_off {
                return ffi::SQLITE_IOERR_DELETE;
            }
            // A deleted file has nothing left to restore.
            state.unsynced.remove(&path);
        }
        let real = real_vfs(vfs);
        (*real).xDelete.expect("xDelete")(real, name, sync_dir)
    }
}

unsafe extern "C" fn vfs_access(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xAccess.expect("xAccess")(real, name, flags, out)
    }
}

unsafe extern "C" fn vfs_full_pathname(
    vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xFullPathname.expect("xFullPathname")(real, name, n, out)
    }
}

unsafe extern "C" fn vfs_randomness(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xRandomness.expect("xRandomness")(real, n, out)
    }
}

unsafe extern "C" fn vfs_sleep(vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xSleep.expect("xSleep")(real, micros)
    }
}

unsafe extern "C" fn vfs_current_time(vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xCurrentTime.expect("xCurrentTime")(real, out)
    }
}

unsafe extern "C" fn vfs_get_last_error(vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xGetLastError.expect("xGetLastError")(real, n, out)
    }
}

unsafe extern "C" fn vfs_current_time_int64(
    vfs: *mut ffi::sqlite3_vfs,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: forwarding to the default VFS.
    unsafe {
        let real = real_vfs(vfs);
        (*real).xCurrentTimeInt64.expect("xCurrentTimeInt64")(real, out)
    }
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(file_close),
    xRead: Some(file_read),
    xWrite: Some(file_write),
    xTruncate: Some(file_truncate),
    xSync: Some(file_sync),
    xFileSize: Some(file_size),
    xLock: Some(file_lock),
    xUnlock: Some(file_unlock),
    xCheckReservedLock: Some(file_check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(file_sector_size),
    xDeviceCharacteristics: Some(file_device_characteristics),
    xShmMap: Some(file_shm_map),
    xShmLock: Some(file_shm_lock),
    xShmBarrier: Some(file_shm_barrier),
    xShmUnmap: Some(file_shm_unmap),
    xFetch: Some(file_fetch),
    xUnfetch: Some(file_unfetch),
};

unsafe extern "C" fn file_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file this VFS opened, once; its `OpenFile` is freed here.
    unsafe {
        let wrapped = file.cast::<WrappedFile>();
        let open = Box::from_raw((*wrapped).open);
        let real = open.real();
        let rc = real_methods(real).xClose.expect("xClose")(real);
        (*wrapped).open = std::ptr::null_mut();
        drop(open);
        rc
    }
}

unsafe extern "C" fn file_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    n: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: forwarding to the real file; reads change nothing, so they work without power
    // too (SQLite then fails at its next write instead of looping on failed reads).
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xRead.expect("xRead")(real, buf, n, offset)
    }
}

unsafe extern "C" fn file_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    n: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: forwarding to the real file, under the disk's lock so that a cut cannot fall
    // between saving the old bytes and writing the new ones.
    unsafe {
        let open = open_file(file);
        let real = open.real();
        let write = real_methods(real).xWrite.expect("xWrite");
        let Some(disk) = &open.disk else {
            return write(real, buf, n, offset);
        };
        let mut state = disk.lock();
        if !state.may_change(Change::Write {
            database: open.is_database,
        }) {
            return ffi::SQLITE_IOERR_WRITE;
        }
        state.save_before_change(open, offset, Some(offset + i64::from(n)));
        write(real, buf, n, offset)
    }
}

unsafe extern "C" fn file_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: as in `file_write`.
    unsafe {
        let open = open_file(file);
        let real = open.real();
        let truncate = real_methods(real).xTruncate.expect("xTruncate");
        let Some(disk) = &open.disk else {
            return truncate(real, size);
        };
        let mut state = disk.lock();
        if !state.may_change(Change::Truncate) {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        state.save_before_change(open, size, None);
        truncate(real, size)
    }
}

unsafe extern "C" fn file_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: forwarding to the real file. A logged file is not really fsync'd: the undo log,
    // not the test machine's disk, decides what survives, and skipping the fsync keeps the
    // test fast.
    unsafe {
        let open = open_file(file);
        let Some(disk) = &open.disk else {
            let real = open.real();
            return real_methods(real).xSync.expect("xSync")(real, flags);
        };
        let mut state = disk.lock();
        if !state.may_change(Change::Sync {
            database: open.is_database,
        }) {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        if !state.ignores_syncs {
            state.unsynced.remove(&open.path);
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xFileSize.expect("xFileSize")(real, size)
    }
}

unsafe extern "C" fn file_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xLock.expect("xLock")(real, level)
    }
}

unsafe extern "C" fn file_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xUnlock.expect("xUnlock")(real, level)
    }
}

unsafe extern "C" fn file_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xCheckReservedLock.expect("xCheckReservedLock")(real, out)
    }
}

unsafe extern "C" fn file_control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xFileControl.expect("xFileControl")(real, op, arg)
    }
}

unsafe extern "C" fn file_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xSectorSize.expect("xSectorSize")(real)
    }
}

unsafe extern "C" fn file_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real)
            .xDeviceCharacteristics
            .expect("xDeviceCharacteristics")(real)
    }
}

unsafe extern "C" fn file_shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    page_size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xShmMap.expect("xShmMap")(real, page, page_size, extend, out)
    }
}

unsafe extern "C" fn file_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xShmLock.expect("xShmLock")(real, offset, n, flags)
    }
}

unsafe extern "C" fn file_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xShmBarrier.expect("xShmBarrier")(real);
    }
}

unsafe extern "C" fn file_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xShmUnmap.expect("xShmUnmap")(real, delete)
    }
}

unsafe extern "C" fn file_fetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    n: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xFetch.expect("xFetch")(real, offset, n, out)
    }
}

unsafe extern "C" fn file_unfetch(file: *mut ffi::sqlite3_file, offset: i64, p: *mut c_void) -> c_int {
    // SAFETY: forwarding to the real file.
    unsafe {
        let real = open_file(file).real();
        real_methods(real).xUnfetch.expect("xUnfetch")(real, offset, p)
    }
}
