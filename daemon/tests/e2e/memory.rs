//! The daemon keeps the memory of request frames for the next request
//! (`limits::ALLOCATOR_TRIM_THRESHOLD`): a steady producer of 1 MB batches
//! must not make it fault fresh zeroed pages in for every frame, as glibc's
//! default trimming did (a tenth of a producer run's CPU). Counted from the
//! daemon's minor page faults in /proc: a count, never a time.

use crate::messages::{logged_in, send, stream_with_topic};
use iggyd_testkit::TestDaemon;

/// Batches of 1,000 messages of 1,000 bytes: about 1 MB per frame.
const MESSAGES: usize = 1_000;
const LEN: usize = 1_000;
const WARM_UP: usize = 20;
const MEASURED: usize = 100;
const PAGE: usize = 4_096;

/// The daemon's minor page faults so far (field 10 of /proc/PID/stat).
fn minor_faults(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the daemon's stat");
    // The command name (field 2) may hold spaces; fields count from its ')'.
    let after_name = &stat[stat.rfind(')').expect("stat has a name") + 2..];
    after_name
        .split(' ')
        .nth(7)
        .and_then(|field| field.parse().ok())
        .expect("minflt in stat")
}

/// Sends `MEASURED` batches after a warm-up and returns the daemon's minor
/// faults per page of frame received.
fn faults_per_page(daemon: &TestDaemon) -> f64 {
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut client, "s", "t", 1);
    let payload = vec![0x5a_u8; LEN];
    let batch: Vec<&[u8]> = vec![payload.as_slice(); MESSAGES];
    for _ in 0..WARM_UP {
        send(&mut client, "s", "t", 0, &batch);
    }
    let before = minor_faults(daemon.pid());
    for _ in 0..MEASURED {
        send(&mut client, "s", "t", 0, &batch);
    }
    let faults = minor_faults(daemon.pid()) - before;
    let pages = MEASURED * MESSAGES * LEN / PAGE;
    let per_page = faults as f64 / pages as f64;
    println!("{faults} minor faults for {pages} pages of frames: {per_page:.3} per page");
    per_page
}

// Proves a steady producer's frames reuse the daemon's memory: fewer than
// one minor fault per ten pages received, where glibc returning each
// frame (kept when the operator sets GLIBC_TUNABLES: here a fixed mmap
// threshold, the contrast the check is able to see) faults in about
// every page again. (glibc's default threshold adapts to what was freed
// before, so with no tuning at all the contrast came and went: 0.066
// faults per page in one CI run.)
#[test]
fn a_steady_producer_reuses_the_daemons_memory() {
    let tuned = faults_per_page(&TestDaemon::builder().spawn());
    let untuned = faults_per_page(
        &TestDaemon::builder()
            .env("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072")
            .spawn(),
    );
    assert!(
        untuned > 0.5,
        "glibc returning each frame faults its pages in again ({untuned:.3} per page): \
         the contrast this test relies on is gone"
    );
    assert!(
        tuned < 0.1,
        "{tuned:.3} minor faults per page of frames: request memory goes back to \
         the kernel after each frame"
    );
}
