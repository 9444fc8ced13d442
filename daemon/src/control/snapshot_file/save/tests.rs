//! Tests of `snapshot_file` writing: a ZIP built by a real `snapshot`
//! worker lands in a new file that the `zip` reader opens, with mode 0640
//! and no temporary file left; every refusal (relative, existing, no such
//! directory, not a directory, a trailing slash, inside the data directory,
//! a directory the daemon may not write into) is answered before anything
//! is queued; a name taken between the check and the rename is never
//! replaced; a worker that does not deliver in time writes nothing.

use super::*;
use crate::control::snapshot_file::SnapshotWorker;
use crate::control::snapshot_file::tests::{entries, sources};
use crate::net::snapshot_request::queue;
use std::os::unix::fs::PermissionsExt;

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Proves the whole op on a real worker: the file is a ZIP with what was
/// asked (test and server_config: summary, test.txt, the configuration,
/// plan and metadata), of the size the message states, mode 0640, and the
/// directory holds nothing else.
#[test]
fn a_built_zip_lands_in_a_new_file_that_unzips() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let (files, jobs) = queue();
    let worker = SnapshotWorker::start(&files, jobs, sources(data.path())).unwrap();
    let path = out.path().join("iggyd-snapshot.zip");
    let request = SnapshotFileRequest::parse(4, &[4, 6]).unwrap();
    let saved = save(
        Some(&files),
        request,
        &path,
        data.path(),
        Duration::from_secs(30),
    )
    .unwrap();
    worker.stop();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(saved.bytes, bytes.len() as u64);
    assert_eq!(saved.path, std::fs::canonicalize(&path).unwrap());
    assert_eq!(
        saved.message(),
        format!(
            "wrote a snapshot ZIP of {} bytes to {}",
            bytes.len(),
            saved.path.display()
        )
    );
    let names: Vec<String> = entries(&bytes)
        .into_iter()
        .map(|(name, method, _)| {
            assert_eq!(method, zip::CompressionMethod::Zstd, "{name}");
            name
        })
        .collect();
    assert_eq!(
        names,
        [
            "summary.json",
            "test.txt",
            "server_config.toml",
            "plan.json",
            "metadata.json"
        ]
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, SNAPSHOT_FILE_MODE);
    assert_eq!(listing(out.path()), ["iggyd-snapshot.zip"]);
}

/// A directory the current user may not write into, until dropped: mode
/// 0500 for an ordinary user; root ignores modes, so for root the directory
/// is made immutable (`chattr +i`, as ext4 and most local file systems
/// allow).
struct Unwritable {
    dir: PathBuf,
    immutable: bool,
}

impl Unwritable {
    fn new(dir: &Path) -> Unwritable {
        if nix::unistd::geteuid().is_root() {
            let status = std::process::Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .status()
                .expect("chattr (e2fsprogs) runs");
            assert!(
                status.success(),
                "chattr +i {} failed: root needs an immutable directory here",
                dir.display()
            );
            Unwritable {
                dir: dir.to_path_buf(),
                immutable: true,
            }
        } else {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
            Unwritable {
                dir: dir.to_path_buf(),
                immutable: false,
            }
        }
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.immutable {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.dir)
                .status();
        } else {
            let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700));
        }
    }
}

/// Proves each refusal names the problem and comes before anything is
/// queued: the queue here has no worker, so a request that passed the
/// checks would time out instead; existing files keep their contents.
#[test]
fn every_refusal_is_answered_before_a_build() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let (files, _jobs) = queue();
    let existing = out.path().join("taken.zip");
    std::fs::write(&existing, b"keep me").unwrap();
    let dangling = out.path().join("dangling.zip");
    std::os::unix::fs::symlink(out.path().join("nowhere"), &dangling).unwrap();
    let a_file = out.path().join("plain");
    std::fs::write(&a_file, b"").unwrap();
    let locked = out.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let unwritable = Unwritable::new(&locked);
    let cases: Vec<(PathBuf, &str)> = vec![
        (PathBuf::from("snap.zip"), "snap.zip is relative"),
        (existing.clone(), "taken.zip already exists"),
        (dangling.clone(), "dangling.zip already exists"),
        (
            out.path().join("missing/snap.zip"),
            "missing does not exist or cannot be read",
        ),
        (a_file.join("snap.zip"), "plain is not a directory"),
        (PathBuf::from("/"), "names no file"),
        (out.path().join("dir/"), "names no file"),
        (data.path().join("snap.zip"), "is inside the data directory"),
        (locked.join("snap.zip"), "the daemon may not write into"),
    ];
    for (path, needle) in cases {
        let started = Instant::now();
        let error = save(
            Some(&files),
            SnapshotFileRequest::parse(2, &[100]).unwrap(),
            &path,
            data.path(),
            Duration::from_secs(5),
        )
        .expect_err("refused");
        let text = error.to_string();
        assert!(
            text.starts_with("snapshot_file: ") && text.contains(needle),
            "{}: {text:?} lacks {needle:?}",
            path.display()
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{}: refused only after waiting for a build",
            path.display()
        );
    }
    drop(unwritable);
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    assert_eq!(
        listing(out.path()),
        ["dangling.zip", "locked", "plain", "taken.zip"]
    );
    assert!(listing(&locked).is_empty());
    assert!(listing(data.path()).iter().all(|name| name != "snap.zip"));
}

/// Proves a name that appears between the check and the rename is kept:
/// the write is refused as existing, the other file keeps its bytes and
/// the temporary file is gone.
#[test]
fn a_name_taken_meanwhile_is_never_replaced() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("late.zip");
    let target = check(&path, Path::new("/nonexistent-data-dir")).unwrap();
    std::fs::write(&path, b"the other writer's").unwrap();
    let error = write_new(&target, b"PK\x05\x06").expect_err("the name is taken");
    assert!(matches!(error, SaveError::Exists { .. }), "{error}");
    assert_eq!(std::fs::read(&path).unwrap(), b"the other writer's");
    assert_eq!(listing(out.path()), ["late.zip"]);
}

/// Proves the admin side waits for the worker no longer than asked: with
/// no worker reading the queue the op answers that nothing was written,
/// and nothing was; without a worker at all it says so; a stopped worker's
/// answer is passed on.
#[test]
fn no_delivery_writes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("never.zip");
    let request = SnapshotFileRequest::parse(1, &[4]).unwrap();
    let (files, jobs) = queue();
    let started = Instant::now();
    let error = save(
        Some(&files),
        request.clone(),
        &path,
        data.path(),
        Duration::from_millis(200),
    )
    .expect_err("nobody builds");
    assert!(matches!(error, SaveError::TimedOut), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.to_string().contains("nothing was written"), "{error}");
    let error = save(
        None,
        request.clone(),
        &path,
        data.path(),
        Duration::from_secs(1),
    )
    .expect_err("no worker");
    assert!(matches!(error, SaveError::NoWorker), "{error}");
    let worker = SnapshotWorker::start(&files, jobs, sources(data.path())).unwrap();
    worker.stop();
    let error = save(
        Some(&files),
        request,
        &path,
        data.path(),
        Duration::from_secs(5),
    )
    .expect_err("stopped");
    assert_eq!(error.to_string(), "snapshot_file: the daemon is stopping");
    assert!(listing(out.path()).is_empty());
}
