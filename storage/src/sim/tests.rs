//! Unit tests of the simulated disk (`sim.rs`): what a crash keeps and
//! drops, the injected faults, durable renames, the directory model
//! (listing, moving a tree, removal rules, `chattr +i`), and held syncs and
//! reads waking their tasks when released.

use super::*;

// Unsynced writes vanish on crash, synced ones stay; an unsynced directory
// entry vanishes with its file.
#[test]
fn crash_drops_unsynced() {
    let io = SimIo::new(1);
    block_on(async {
        let dir = Path::new("/p");
        io.create_dir_all(dir).await.unwrap();
        let path = dir.join("a");
        let file = io.open(&path, OpenMode::Create).await.unwrap();
        let (result, _) = io.write_at(&file, b"abc".to_vec(), 0).await;
        result.unwrap();
        io.sync(&file).await.unwrap();
        io.sync_dir(dir).await.unwrap();
        let (result, _) = io.write_at(&file, b"def".to_vec(), 3).await;
        result.unwrap();
        let other = io.open(&dir.join("b"), OpenMode::Create).await.unwrap();
        io.sync(&other).await.unwrap();
        io.crash();
        assert_eq!(
            io.read_exact_at(&file, 0, 1)
                .await
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBADF)
        );
        let file = io.open(&path, OpenMode::Existing).await.unwrap();
        assert_eq!(io.file_len(&file).await.unwrap(), 3);
        assert_eq!(io.list_dir(dir).await.unwrap(), vec!["a".to_owned()]);
    });
}

// Faults: EIO on the next fsync, ENOSPC past capacity (with the fitting
// prefix stored), torn writes keep a prefix of the unsynced tail.
#[test]
fn faults() {
    let io = SimIo::new(2);
    block_on(async {
        let dir = Path::new("/p");
        io.create_dir_all(dir).await.unwrap();
        let file = io.open(&dir.join("a"), OpenMode::Create).await.unwrap();
        io.sync_dir(dir).await.unwrap();
        io.fail_next_fsync();
        assert_eq!(
            io.sync(&file).await.unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        io.sync(&file).await.unwrap();
        io.set_capacity(Some(10));
        let (result, _) = io.write_at(&file, vec![1; 16], 0).await;
        assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(io.file_len(&file).await.unwrap(), 10);
        io.set_capacity(None);
        io.set_torn_writes(true);
        let mut lengths = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let file = io
                .open(&dir.join("a"), OpenMode::CreateTruncate)
                .await
                .unwrap();
            io.sync(&file).await.unwrap();
            let (result, _) = io.write_at(&file, vec![7; 100], 0).await;
            result.unwrap();
            io.crash();
            lengths.insert(io.len_of(&dir.join("a")).unwrap());
        }
        assert!(lengths.contains(&0));
        assert!(lengths.len() > 2);
    });
}

// A failure armed a few fsyncs ahead lands on exactly that fsync (file
// or directory), and a crash disarms it; a renamed file keeps its new
// name across a crash although its directory was never synced.
#[test]
fn fsync_failure_after_successes_and_durable_rename() {
    let io = SimIo::new(3);
    block_on(async {
        let dir = Path::new("/p");
        io.create_dir_all(dir).await.unwrap();
        let file = io.open(&dir.join("a"), OpenMode::Create).await.unwrap();
        io.fail_fsync_after(2);
        io.sync(&file).await.unwrap();
        io.sync_dir(dir).await.unwrap();
        assert_eq!(
            io.sync(&file).await.unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        io.sync(&file).await.unwrap();
        io.fail_fsync_after(0);
        io.crash();
        let file = io.open(&dir.join("a"), OpenMode::Existing).await.unwrap();
        io.sync(&file).await.unwrap();

        let temporary = io.open(&dir.join("b.tmp"), OpenMode::Create).await.unwrap();
        let (result, _) = io.write_at(&temporary, b"new".to_vec(), 0).await;
        result.unwrap();
        io.sync(&temporary).await.unwrap();
        io.rename(&dir.join("b.tmp"), &dir.join("b")).await.unwrap();
        io.crash();
        assert_eq!(io.contents_of(&dir.join("b")), Some(b"new".to_vec()));
        assert_eq!(io.contents_of(&dir.join("b.tmp")), None);
    });
}

// Directories: listed with files, moved with everything under them (and
// their immutable flags), removed only when empty, EISDIR for unlink; an
// immutable file or directory refuses removal and rename, and nothing is
// created in an immutable directory; removal failures come at the set rate.
#[test]
fn directories_and_immutable_paths() {
    let io = SimIo::new(4);
    block_on(async {
        let data = Path::new("/d");
        io.create_dir_all(&data.join("a/b")).await.unwrap();
        let file = io.open(&data.join("a/f"), OpenMode::Create).await.unwrap();
        drop(file);
        io.sync_dir(&data.join("a")).await.unwrap();
        assert_eq!(io.list_dir(&data.join("a")).await.unwrap(), vec!["b", "f"]);
        let error = io.remove_file(&data.join("a")).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EISDIR));
        let error = io.remove_dir(&data.join("a")).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOTEMPTY));
        io.set_immutable(&data.join("a/f"), true);
        io.rename(&data.join("a"), &data.join("z")).await.unwrap();
        assert!(io.dir_exists(&data.join("z/b")) && !io.dir_exists(&data.join("a")));
        assert_eq!(io.immutable_paths(), vec![data.join("z/f")]);
        let error = io.remove_file(&data.join("z/f")).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        let error = io
            .rename(&data.join("z/f"), &data.join("g"))
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        io.set_immutable(&data.join("z/f"), false);
        io.set_immutable(&data.join("z"), true);
        let error = io.remove_file(&data.join("z/f")).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        let error = io
            .rename(&data.join("z"), &data.join("y"))
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        let error = io
            .open(&data.join("z/new"), OpenMode::Create)
            .await
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        io.set_immutable(&data.join("z"), false);
        io.crash();
        assert_eq!(io.files_under(data), vec![data.join("z/f")]);
        io.set_unlink_failures(Some((1, 1)));
        let error = io.remove_file(&data.join("z/f")).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        io.set_unlink_failures(None);
        io.remove_file(&data.join("z/f")).await.unwrap();
        io.remove_dir(&data.join("z/b")).await.unwrap();
        io.remove_dir(&data.join("z")).await.unwrap();
        assert_eq!(io.list_dir(data).await.unwrap(), Vec::<String>::new());
    });
}

/// A waker that remembers being woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

// A held sync and a held read wake the task that waits on them when they
// are released: an executor polls a pending future again only once it is
// woken, so without the wake a task waiting on a stalled disk slept for
// ever after the stall ended (the Raft cluster simulation's executor polls
// only what was woken).
#[test]
fn released_holds_wake_their_waiters() {
    let io = SimIo::new(5);
    let file = block_on(async {
        io.create_dir_all(Path::new("/p")).await.unwrap();
        let file = io.open(Path::new("/p/a"), OpenMode::Create).await.unwrap();
        let (result, _) = io.write_at(&file, vec![7u8; 4096], 0).await;
        result.unwrap();
        file
    });
    let flag = std::sync::Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut context = Context::from_waker(&waker);

    io.hold_syncs(true);
    let mut sync = std::pin::pin!(io.sync(&file));
    assert!(sync.as_mut().poll(&mut context).is_pending());
    assert!(!flag.0.load(std::sync::atomic::Ordering::Relaxed));
    io.hold_syncs(false);
    assert!(
        flag.0.swap(false, std::sync::atomic::Ordering::Relaxed),
        "releasing the sync woke its task"
    );
    assert!(matches!(
        sync.as_mut().poll(&mut context),
        Poll::Ready(Ok(()))
    ));

    io.hold_reads(true);
    let buf = AlignedBuf::with_capacity(4096);
    let mut read = std::pin::pin!(io.read_at_most(&file, buf, 0, 4096));
    assert!(read.as_mut().poll(&mut context).is_pending());
    assert!(!flag.0.load(std::sync::atomic::Ordering::Relaxed));
    io.hold_reads(false);
    assert!(
        flag.0.swap(false, std::sync::atomic::Ordering::Relaxed),
        "releasing the read woke its task"
    );
    match read.as_mut().poll(&mut context) {
        Poll::Ready((result, _)) => assert_eq!(result.unwrap(), 4096),
        Poll::Pending => panic!("the released read completes"),
    }
}
