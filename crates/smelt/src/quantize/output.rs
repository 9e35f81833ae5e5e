//! The output file, written so that nothing is lost: never over the input
//! (by path, symbolic link or hard link), and never a partial file at the
//! output's path. Bytes go to a temporary file beside the output, which is
//! synced and renamed into place only once complete; an error or a drop
//! before [`OutputFile::commit`] removes it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::QuantizeError;

/// Buffered writes of whole tensors; large enough that a write is rarely
/// split.
const BUFFER_BYTES: usize = 8 << 20;

pub struct OutputFile {
    path: PathBuf,
    temp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl OutputFile {
    /// Checks `path` against `input` and its folder, then creates the
    /// temporary file beside it.
    pub fn create(path: &Path, input: &Path) -> Result<Self, QuantizeError> {
        check_output(path, input)?;
        let name = path.file_name().ok_or_else(|| QuantizeError::Output {
            path: path.to_path_buf(),
            reason: "it names no file".into(),
        })?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.partial", std::process::id()));
        let temp = path.with_file_name(temp_name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|source| QuantizeError::Io {
                path: temp.clone(),
                source,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            temp,
            file: Some(BufWriter::with_capacity(BUFFER_BYTES, file)),
        })
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), QuantizeError> {
        let file = self.file.as_mut().expect("open until commit");
        file.write_all(bytes).map_err(|source| QuantizeError::Io {
            path: self.temp.clone(),
            source,
        })
    }

    /// Flushes and syncs the file, renames it to the output's path and
    /// syncs the folder, so the file is whole on disk before and after. On
    /// an error the temporary file is removed.
    pub fn commit(mut self) -> Result<(), QuantizeError> {
        let file = self.file.take().expect("open until commit");
        let done = self.finish(file);
        if done.is_err() {
            let _ = fs::remove_file(&self.temp);
        }
        done
    }

    fn finish(&self, file: BufWriter<File>) -> Result<(), QuantizeError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| QuantizeError::Io { path, source }
        };
        let file = file
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(io(&self.temp))?;
        file.sync_all().map_err(io(&self.temp))?;
        drop(file);
        fs::rename(&self.temp, &self.path).map_err(io(&self.path))?;
        // The rename is durable once the folder is synced; not every
        // platform can open a folder for that, so failing to is not an error.
        if let Ok(dir) = File::open(folder_of(&self.path)) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// The folder a path's file is in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Refuses an output that is the input, or that cannot be written.
/// [`OutputFile::create`] checks this; a caller may check earlier, before
/// long work.
pub fn check_output(path: &Path, input: &Path) -> Result<(), QuantizeError> {
    let bad = |reason: String| QuantizeError::Output {
        path: path.to_path_buf(),
        reason,
    };
    let folder = folder_of(path);
    match fs::metadata(folder) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(bad(format!("{} is not a folder", folder.display()))),
        Err(e) => return Err(bad(format!("its folder {}: {e}", folder.display()))),
    }
    if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(bad("it is a folder".into()));
    }
    if same_file(path, input).map_err(|e| bad(e.to_string()))? {
        return Err(QuantizeError::SameFile {
            input: input.to_path_buf(),
            output: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Whether `a` (which need not exist) is the file `b`: the same path once
/// links are resolved, or the same file by identity (a hard link).
fn same_file(a: &Path, b: &Path) -> io::Result<bool> {
    let (Ok(ca), Ok(cb)) = (fs::canonicalize(a), fs::canonicalize(b)) else {
        // A file that does not exist is not the input.
        return Ok(false);
    };
    if ca == cb {
        return Ok(true);
    }
    same_identity(&ca, &cb)
}

#[cfg(unix)]
fn same_identity(a: &Path, b: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = (fs::metadata(a)?, fs::metadata(b)?);
    Ok(ma.dev() == mb.dev() && ma.ino() == mb.ino())
}

/// Without a file identity to compare, canonical paths must do.
#[cfg(not(unix))]
fn same_identity(_: &Path, _: &Path) -> io::Result<bool> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("smelt-output-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn refuses_the_input_by_any_name() {
        let dir = scratch("same");
        let input = dir.join("in.gguf");
        fs::write(&input, b"model").unwrap();
        let same = |out: &Path| {
            matches!(
                OutputFile::create(out, &input),
                Err(QuantizeError::SameFile { .. })
            )
        };
        assert!(same(&input));
        assert!(same(&dir.join(".").join("in.gguf")));
        fs::hard_link(&input, dir.join("hard.gguf")).unwrap();
        assert!(same(&dir.join("hard.gguf")));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&input, dir.join("soft.gguf")).unwrap();
            assert!(same(&dir.join("soft.gguf")));
        }
        assert_eq!(fs::read(&input).unwrap(), b"model");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn commits_whole_or_leaves_nothing() {
        let dir = scratch("commit");
        let (input, out) = (dir.join("in.gguf"), dir.join("out.gguf"));
        fs::write(&input, b"model").unwrap();
        fs::write(&out, b"old").unwrap();

        let mut f = OutputFile::create(&out, &input).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert_eq!(
            fs::read(&out).unwrap(),
            b"old",
            "an unfinished write leaves the old file"
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            2,
            "and no temporary file"
        );

        let mut f = OutputFile::create(&out, &input).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"new");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);

        // A commit that fails (a folder took the output's name meanwhile)
        // leaves no temporary file either.
        let late = dir.join("late.gguf");
        let mut f = OutputFile::create(&late, &input).unwrap();
        f.write_all(b"new").unwrap();
        fs::create_dir(&late).unwrap();
        fs::write(late.join("inside"), b"x").unwrap();
        assert!(f.commit().is_err());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 3);
        fs::remove_dir_all(&late).unwrap();

        let missing = dir.join("no-such-folder").join("out.gguf");
        assert!(matches!(
            OutputFile::create(&missing, &input),
            Err(QuantizeError::Output { .. })
        ));
        assert!(matches!(
            OutputFile::create(&dir, &input),
            Err(QuantizeError::Output { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
