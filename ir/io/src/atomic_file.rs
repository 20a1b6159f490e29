//! Writing a file so that it is either untouched or complete: the content goes to a
//! temporary file beside the destination, is synced, then renamed over it, and the
//! directory is synced so that the rename itself is on disk.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `path` through `fill`; on any error the destination is left as it was and the
/// temporary file is removed.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let Some(file_name) = path.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path"));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{}.{}.{n}.tmp", file_name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut w = BufWriter::new(fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?);
        fill(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, path)?;
        // Best effort: some file systems cannot open or sync a directory.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
