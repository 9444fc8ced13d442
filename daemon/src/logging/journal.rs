//! Under systemd: is stderr the journal's stream, and which syslog priority
//! does a `tracing` level carry. This file owns the `JOURNAL_STREAM` check
//! (sd_journal_stream_fd(3), systemd.exec(5)) and the level → priority table;
//! it formats nothing and writes nothing.

use std::os::fd::AsFd;
use tracing::Level;

/// `JOURNAL_STREAM`'s value: the device and inode of the stream systemd
/// connected to the service's stdout/stderr, as `DEV:INODE` in decimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalStream {
    pub device: u64,
    pub inode: u64,
}

impl JournalStream {
    /// Parses `DEV:INODE` (both decimal, nothing around them). Anything else
    /// is `None`: a malformed value means "not the journal", never an error,
    /// because the variable may have been inherited from an unrelated parent.
    pub fn parse(value: &str) -> Option<JournalStream> {
        let (device, inode) = value.split_once(':')?;
        let decimal = |text: &str| {
            (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
                .then(|| text.parse::<u64>().ok())
                .flatten()
        };
        Some(JournalStream {
            device: decimal(device)?,
            inode: decimal(inode)?,
        })
    }

    /// True when the stream is the file with this device and inode. systemd
    /// asks programs to compare both: the variable is inherited by children
    /// whose stderr was redirected elsewhere, and then it must be ignored.
    pub fn matches(&self, device: u64, inode: u64) -> bool {
        self.device == device && self.inode == inode
    }
}

/// True when `JOURNAL_STREAM` names this process's stderr (fstat of fd 2).
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some(stream) = value.to_str().and_then(JournalStream::parse) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_fd()) {
        // `st_dev`/`st_ino` are u64 on every Linux target this daemon
        // builds for; the casts only widen on the rest.
        #[allow(clippy::useless_conversion)]
        Ok(stat) => stream.matches(u64::from(stat.st_dev), u64::from(stat.st_ino)),
        Err(_) => false,
    }
}

/// The syslog priority journald stores for a level (sd-daemon(3) prefixes):
/// ERROR → 3 (err), WARN → 4 (warning), INFO → 6 (info), DEBUG and TRACE →
/// 7 (debug). Notice (5) is not used: `tracing` has no such level.
pub fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Proves the parser takes exactly `DEV:INODE` in decimal and refuses
    /// everything systemd would never write.
    #[test]
    fn journal_stream_parses_decimal_dev_and_inode_only() {
        assert_eq!(
            JournalStream::parse("64773:1234567"),
            Some(JournalStream {
                device: 64773,
                inode: 1234567
            })
        );
        assert_eq!(
            JournalStream::parse("0:0"),
            Some(JournalStream {
                device: 0,
                inode: 0
            })
        );
        for bad in [
            "",
            ":",
            "1:",
            ":1",
            "1",
            "1:2:3",
            " 1:2",
            "1:2 ",
            "+1:2",
            "-1:2",
            "0x10:2",
            "1:abc",
            "99999999999999999999999:1",
        ] {
            assert_eq!(JournalStream::parse(bad), None, "{bad:?}");
        }
    }

    /// Proves a stream matches only when both device and inode agree, using
    /// a real file's metadata as the stderr stand-in.
    #[test]
    fn journal_stream_matches_only_the_same_device_and_inode() {
        let file = tempfile::tempfile().expect("temp file");
        let meta = file.metadata().expect("metadata");
        let stream =
            JournalStream::parse(&format!("{}:{}", meta.dev(), meta.ino())).expect("parse");
        assert!(stream.matches(meta.dev(), meta.ino()));
        assert!(!stream.matches(meta.dev(), meta.ino() + 1));
        assert!(!stream.matches(meta.dev() + 1, meta.ino()));
        let other = tempfile::tempfile().expect("temp file");
        let other = other.metadata().expect("metadata");
        assert!(!stream.matches(other.dev(), other.ino()));
    }

    /// Proves the level → syslog priority table of sd-daemon(3).
    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::DEBUG), 7);
        assert_eq!(priority(Level::TRACE), 7);
    }
}
