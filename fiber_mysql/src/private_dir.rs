//! Directories only this user can enter: the per-user cache that holds the MariaDB
//! template, and the per-run data directories under the temp dir.
//!
//! Another local user must not be able to choose what a private server starts from
//! (a planted `mysql.user` table), nor read what it writes. So every directory the
//! launcher uses is created here with mode 0700 by `mkdir` itself (which fails on
//! anything already there, a symlink included) and checked after creation, and a
//! directory found in place (the cache, a template) is used only when it passes
//! [`verify_private`] and, for a template, [`verify_tree`]. A failed check is a
//! refusal naming the path and what to delete, never a silent fallback to it.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Mode bits that would let the group or others in (`rwx` for both).
const GROUP_OTHER: u32 = 0o077;
/// Mode bits that would let the group or others write.
const GROUP_OTHER_WRITE: u32 = 0o022;
/// The sticky bit: in a world-writable directory (`/tmp`) only an entry's owner may
/// rename or remove it.
const STICKY: u32 = 0o1000;

/// Where the template lives, and whether it is a throwaway (removed after use).
#[derive(Debug)]
pub(crate) struct CacheDir {
    pub(crate) path: PathBuf,
    pub(crate) throwaway: bool,
}

/// The effective uid of this process (the owner of what it creates).
pub(crate) fn uid() -> u32 {
    fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

/// `n` random bytes from the kernel, as hex.
pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Error::Launch(format!("/dev/urandom: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// `$XDG_CACHE_HOME/fiberstack`, else `$HOME/.cache/fiberstack`, created 0700.
///
/// When neither variable names an absolute directory whose ancestors only this user
/// (or root) can change, a fresh directory under the temp dir is used instead and
/// marked a throwaway. A `fiberstack` directory that exists but is not private is
/// refused: someone else may have planted it.
pub(crate) fn cache_dir() -> Result<CacheDir> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".cache"))
        });
    let usable = base.filter(|base| {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(base)
            .is_ok()
            && verify_ancestors(&base.join("fiberstack")).is_ok()
    });
    let Some(base) = usable else {
        let path = create_unique(&std::env::temp_dir(), "fiberstack-cache")?;
        return Ok(CacheDir {
            path,
            throwaway: true,
        });
    };
    let path = base.join("fiberstack");
    match fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(Error::Launch(format!(
                "cannot create {}: {e}",
                path.display()
            )))
        }
    }
    verify_private(&path)?;
    Ok(CacheDir {
        path,
        throwaway: false,
    })
}

/// A new directory `parent/prefix-<pid>-<random>`, mode 0700, checked after creation.
pub(crate) fn create_unique(parent: &Path, prefix: &str) -> Result<PathBuf> {
    let path = parent.join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        random_hex(8)?
    ));
    // `mkdir` fails on an existing name, a symlink included: nothing planted is reused.
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&path)
        .map_err(|e| Error::Launch(format!("cannot create {}: {e}", path.display())))?;
    // The mode passed to mkdir is filtered by the umask; set it explicitly, then check.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::Launch(format!("cannot chmod {}: {e}", path.display())))?;
    // In a directory others may write to without the sticky bit, they could swap it.
    match verify_private(&path).and_then(|()| verify_ancestors(&path)) {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = fs::remove_dir(&path);
            Err(e)
        }
    }
}

/// `path` is a real directory (not a symlink), owned by this user, mode 0700 or less.
pub(crate) fn verify_private(path: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(path)
        .map_err(|e| Error::Launch(format!("cannot inspect {}: {e}", path.display())))?;
    if meta.file_type().is_symlink() {
        return Err(refusal(path, "is a symlink"));
    }
    if !meta.is_dir() {
        return Err(refusal(path, "is not a directory"));
    }
    if meta.uid() != uid() {
        return Err(refusal(
            path,
            &format!(
                "is owned by uid {}, not by this user (uid {})",
                meta.uid(),
                uid()
            ),
        ));
    }
    if meta.mode() & GROUP_OTHER != 0 {
        return Err(refusal(
            path,
            &format!("has mode {:o}; it must be 0700", meta.mode() & 0o7777),
        ));
    }
    Ok(())
}

/// A template found in place: [`verify_private`] for its top, and everything inside is
/// owned by this user and no symlink (`cp -a` would copy a link, and mariadbd follow it).
pub(crate) fn verify_tree(path: &Path) -> Result<()> {
    verify_private(path)?;
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = fs::read_dir(&dir)
            .map_err(|e| Error::Launch(format!("cannot read {}: {e}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::Launch(format!("{}: {e}", dir.display())))?;
            let meta = fs::symlink_metadata(entry.path())
                .map_err(|e| Error::Launch(format!("{}: {e}", entry.path().display())))?;
            let what = if meta.file_type().is_symlink() {
                Some(format!("holds a symlink, {}", entry.path().display()))
            } else if meta.uid() != uid() {
                Some(format!(
                    "holds {}, owned by uid {}",
                    entry.path().display(),
                    meta.uid()
                ))
            } else {
                None
            };
            if let Some(what) = what {
                return Err(refusal(path, &what));
            }
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Every ancestor of `path` is owned by this user or root, and writable by nobody
/// else unless sticky (as `/tmp` is): no one else can swap a directory on the way.
fn verify_ancestors(path: &Path) -> Result<()> {
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let meta = fs::metadata(dir)
            .map_err(|e| Error::Launch(format!("cannot inspect {}: {e}", dir.display())))?;
        let owner_ok = meta.uid() == uid() || meta.uid() == 0;
        let write_ok = meta.mode() & GROUP_OTHER_WRITE == 0 || meta.mode() & STICKY != 0;
        if !owner_ok || !write_ok {
            return Err(Error::Launch(format!(
                "{} (owner uid {}, mode {:o}) could be changed by another user: point \
                 TMPDIR (or XDG_CACHE_HOME) at a directory only you can write to",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// The one message for a directory we will not use.
fn refusal(path: &Path, why: &str) -> Error {
    Error::Launch(format!(
        "refusing to use {}: it {why}. Another user may have planted it; \
         delete it (rm -rf '{}') and start again",
        path.display(),
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = create_unique(&std::env::temp_dir(), name).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        dir
    }

    #[test]
    fn a_symlinked_or_open_directory_is_refused() {
        let dir = scratch("fiberstack-pd-test");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = verify_private(&link).unwrap_err().to_string();
        assert!(
            err.contains("is a symlink") && err.contains("rm -rf"),
            "{err}"
        );
        let open = dir.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(verify_private(&open)
            .unwrap_err()
            .to_string()
            .contains("mode 755"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tree_with_a_symlink_deep_inside_is_refused() {
        let dir = scratch("fiberstack-pd-test");
        fs::create_dir_all(dir.join("a/b")).unwrap();
        verify_tree(&dir).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("a/b/user.MAD")).unwrap();
        let err = verify_tree(&dir).unwrap_err().to_string();
        assert!(err.contains("holds a symlink"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_name_is_never_reused_as_a_data_dir() {
        // mkdir fails on anything in place, a symlink to a directory included.
        let dir = scratch("fiberstack-pd-test");
        let link = dir.join("planted");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(fs::DirBuilder::new().mode(0o700).create(&link).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
