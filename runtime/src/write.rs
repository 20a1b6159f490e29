//! All-or-nothing file writes, on the `tempfile` crate: the disk cache's entries and
//! checkpoints go to a temporary file beside the destination, are synced, then renamed
//! over it, so a reader sees the old file or the whole new one, never a half-written one.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Writes `parts`, in order, to `path` all or nothing; on an error `path` is left as it
/// was and the temporary file is removed.
pub(crate) fn write_atomically(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    if path.file_name().is_none() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path"));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    // As `File::create` makes it (0o666 less the umask), not tempfile's private 0o600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut tmp = builder.tempfile_in(dir)?;
    for part in parts {
        tmp.write_all(part)?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path)?;
    // Best effort: the rename itself on disk (some file systems cannot sync a directory).
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
