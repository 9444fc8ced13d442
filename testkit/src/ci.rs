//! Skipping a test honestly. A test that cannot run here (no root for a
//! mount, a tool not installed, a binary not built) calls `skip` and
//! returns; on a developer machine that prints why and the test passes, but
//! under `CI=true` it fails, so a CI run can never be green while skipping.

/// Report that the calling test cannot run here. Panics (fails the test)
/// when the `CI` environment variable is `true` or `1`; otherwise prints
/// `SKIPPED: {why}` to stderr. Use as `return iggyd_testkit::skip("...")`.
#[track_caller]
pub fn skip(why: &str) {
    if in_ci() {
        panic!("CI=true and this test would skip: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// True under CI (`CI=true` or `CI=1`, as GitHub Actions and most runners set).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true" || value == "1")
}
