//! What the test suites of the crates that sandbox agents share: whether a test of kernel
//! enforcement can run here, whether a test workspace should insist on Landlock, and whether a
//! supervised process is really gone.
//! `HARCH_REQUIRE_LANDLOCK` (CI sets it on a Landlock kernel) turns a missing Landlock from a
//! skip into a failure, so a regression cannot hide behind the skip.

const REQUIRE: &str = "HARCH_REQUIRE_LANDLOCK";

/// True where Landlock is available. Elsewhere, says the test is skipped and returns false,
/// unless `HARCH_REQUIRE_LANDLOCK` is set: then it panics, failing the test.
pub fn landlock_available() -> bool {
    if super::landlock_abi().is_some() {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE).is_none(),
        "{REQUIRE} is set but this kernel has no Landlock"
    );
    eprintln!("skipping: no Landlock on this kernel");
    false
}

/// Whether a test workspace should require Landlock: where the kernel has it, or where CI asks
/// for it (kernels without it still run every test that does not need it).
pub fn require_landlock() -> bool {
    super::landlock_abi().is_some() || std::env::var_os(REQUIRE).is_some()
}

/// Whether process `pid` runs no more. A zombie waiting for its reaper counts as gone: it runs
/// nothing.
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z')),
    }
}
