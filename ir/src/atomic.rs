//! All-or-nothing file writes, for every crate that writes a file (npz outputs, pass dumps,
//! the runtime's cache entries and checkpoints, `hloc`'s outputs): the bytes go to a
//! temporary file beside the destination (`tempfile`), are synced, then renamed over it, so
//! a reader sees the old file or the whole new one, never a half-written one.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` all or nothing.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |f| f.write_all(bytes))
}

/// Builds `path` through `fill` all or nothing; on an error `path` is left as it was and
/// the temporary file is removed. A path that names no file (`dir/..`, empty) is an
/// `InvalidInput` error.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut fs::File) -> io::Result<()>,
) -> io::Result<()> {
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
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)?;
    // Best effort: the rename itself on disk (some file systems cannot sync a directory).
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_them_on_errors() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let p = dir.path().join("out.txt");
        write(&p, b"first").expect("writes");
        assert_eq!(fs::read(&p).expect("reads"), b"first");
        let failed = write_with(&p, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("interrupted"))
        });
        assert!(failed.is_err());
        assert_eq!(fs::read(&p).expect("reads"), b"first", "the old file stays");
        assert_eq!(fs::read_dir(dir.path()).expect("lists").count(), 1, "no temporary left");
        let e = write(&dir.path().join(".."), b"x").expect_err("not a file");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
