//! systemd
