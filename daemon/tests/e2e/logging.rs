//! Logging of the real daemon: journal priority prefixes when
//! `JOURNAL_STREAM` names its stderr (and not otherwise), the file log in
//! `<data_dir>/logs`, and an unusable `logging.dir` refused at start.

use iggyd_testkit::{TestDaemon, iggyd_command, run};
use std::os::unix::fs::MetadataExt;

/// The `DEV:INODE` of the file the harness gives the daemon as stderr
/// (`<dir>/daemon.log`, created here first so the harness appends to it).
fn stderr_stream(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("daemon.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("create daemon.log");
    let meta = file.metadata().expect("metadata");
    format!("{}:{}", meta.dev(), meta.ino())
}

fn priority_of(line: &str) -> Option<u8> {
    let rest = line.strip_prefix('<')?;
    let (digit, _) = rest.split_once('>')?;
    let priority: u8 = digit.parse().ok()?;
    (priority <= 7).then_some(priority)
}

/// Proves the check the systemd integration asks for: with `JOURNAL_STREAM`
/// set to the device:inode of the stderr the test gives the daemon, every
/// line carries a `<N>` syslog priority prefix (info lines `<6>`), span and
/// event fields appear as `key=value`, and no ANSI escape byte is written.
#[test]
fn journal_stream_on_stderr_gives_priority_prefixes_and_no_ansi() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = stderr_stream(&dir);
    let mut daemon = TestDaemon::builder()
        .dir(dir)
        .env("JOURNAL_STREAM", &stream)
        .spawn();
    let (status, _) = daemon.stop();
    assert!(status.success(), "exit status {status}");
    let log = daemon.log();
    assert!(
        !log.contains('\x1b'),
        "ANSI escape in the journal stream:\n{log}"
    );
    let lines: Vec<&str> = log.lines().filter(|line| !line.is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        if priority_of(line).is_none() {
            daemon.fail(&format!(
                "a journal line without a priority prefix: {line:?}"
            ));
        }
    }
    let plan = lines
        .iter()
        .find(|line| line.contains("shard plan"))
        .unwrap_or_else(|| daemon.fail("no shard plan line"));
    assert_eq!(priority_of(plan), Some(6), "{plan}");
    assert!(plan.contains(" shards="), "fields as key=value: {plan}");
    let placement = lines
        .iter()
        .find(|line| line.contains("placement"))
        .unwrap_or_else(|| daemon.fail("no placement line"));
    assert!(
        placement.contains(" shard=0") && placement.contains(" pu="),
        "{placement}"
    );
    let stopped = lines
        .iter()
        .find(|line| line.contains("stopped cleanly"))
        .unwrap_or_else(|| daemon.fail("no stopped line"));
    assert_eq!(priority_of(stopped), Some(6), "{stopped}");
    assert!(
        lines.iter().all(|line| !line.contains(" INFO ")),
        "no human level words under the journal:\n{log}"
    );
}

/// Proves an inherited `JOURNAL_STREAM` that names another file is ignored:
/// plain human lines, no prefixes, still no colour (stderr is a file).
#[test]
fn a_journal_stream_for_another_file_is_ignored() {
    let other = tempfile::NamedTempFile::new().expect("temp file");
    let meta = other.as_file().metadata().expect("metadata");
    let mut daemon = TestDaemon::builder()
        .env("JOURNAL_STREAM", &format!("{}:{}", meta.dev(), meta.ino()))
        .spawn();
    let (status, _) = daemon.stop();
    assert!(status.success(), "exit status {status}");
    let log = daemon.log();
    let plan = log
        .lines()
        .find(|line| line.contains("shard plan"))
        .unwrap_or_else(|| daemon.fail("no shard plan line"));
    assert_eq!(priority_of(plan), None, "{plan}");
    assert!(plan.contains(" INFO "), "{plan}");
    assert!(!log.contains('\x1b'), "{log}");
}

/// Proves the daemon writes `<data_dir>/logs/iggyd.log` (the default
/// `logging.dir`) with its start-up and stop lines, plain text, in addition
/// to stderr.
#[test]
fn the_daemon_writes_its_log_file_under_data_dir_logs() {
    let mut daemon = TestDaemon::start();
    let path = daemon.data_dir().join("logs").join("iggyd.log");
    assert!(path.exists(), "{} exists once ready", path.display());
    let (status, _) = daemon.stop();
    assert!(status.success(), "exit status {status}");
    let file = std::fs::read_to_string(&path).expect("read iggyd.log");
    for needle in ["shard plan", "placement", "shard ready", "stopped cleanly"] {
        if !file.contains(needle) {
            daemon.fail(&format!("{needle:?} missing from iggyd.log:\n{file}"));
        }
    }
    assert!(!file.contains('\x1b'), "{file:?}");
    assert!(
        file.lines().all(|line| line.starts_with("20")),
        "every line starts with a UTC timestamp:\n{file}"
    );
    daemon.assert_clean_log();
}

/// Proves a `logging.dir` that cannot be created is a configuration error:
/// exit 78 and a message naming the key, before any shard starts.
#[test]
fn an_unusable_logging_dir_exits_78_naming_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, b"").expect("write file");
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("IGGYD_LOGGING__DIR", blocker.join("logs")));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(output.stderr.contains("logging.dir"), "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    assert!(!output.stderr.contains("shard ready"), "{}", output.stderr);
}

/// Proves the short subcommands leave no log files behind: `plan` and
/// `config` log to stderr only.
#[test]
fn subcommands_create_no_log_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    for subcommand in ["plan", "config"] {
        let output = run(iggyd_command()
            .arg(subcommand)
            .arg("--data-dir")
            .arg(dir.path()));
        assert_eq!(output.code(), Some(0), "{output:?}");
    }
    assert!(
        !dir.path().join("logs").exists(),
        "no logs directory was created"
    );
}
