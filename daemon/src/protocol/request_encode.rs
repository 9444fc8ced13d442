//! Test-only request encoder (filled in by a later commit).
