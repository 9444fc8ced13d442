//! Tidy: rules about the source tree that ARCHITECTURE.md and the style
//! guide state in prose, checked here by reading every `.rs` file of the
//! workspace (the fuzz crate included; `target/` directories and the fuzz
//! corpus and artifacts excluded). It reads files only and never builds or
//! runs anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A source file longer than this is split by responsibility.
const LINES_MAX: usize = 1_000;

/// Files that already pass `LINES_MAX` and are being split. The list may
/// only shrink: a file listed here that is back under the limit (or gone)
/// fails the test until its line is removed, and no file may be added.
const LONG_FILES_ALLOWED: &[&str] = &[];

/// The only files of the daemon that may end the process or print: the
/// binary and the start-up sequence, where an error becomes an exit code.
const MAY_EXIT_OR_PRINT: &[&str] = &["daemon/src/main.rs", "daemon/src/boot.rs"];

/// Crates that must never link the daemon: the console talks to it over
/// the admin socket, the admin API is shared by both sides, and the daemon
/// takes the test kit as a dev-dependency.
const NEVER_LINK_THE_DAEMON: &[&str] = &["tui", "admin-api", "testkit"];

/// The library crates below the daemon: like `daemon/src`, nothing in them
/// may end the process or print.
const LOWER_CRATES: &[&str] = &[
    "wire/src/",
    "storage/src/",
    "peer/src/",
    "metadata/src/",
    "raft/src/",
];

/// Directory names never read: build output and the fuzzers' generated
/// inputs.
const SKIPPED_DIRS: &[&str] = &["target", ".git", "corpus", "artifacts", "coverage"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ lives in the workspace root")
        .to_path_buf()
}

/// Every `.rs` file under the workspace root, as paths relative to it with
/// `/` separators, sorted.
fn rust_files() -> Vec<String> {
    let root = root();
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a workspace directory") {
            let entry = entry.expect("directory entry");
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().expect("file type");
            if kind.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if kind.is_file() && name.ends_with(".rs") {
                let relative = path.strip_prefix(&root).expect("under the root");
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    assert!(
        files.len() > 100 && files.iter().any(|file| file == "daemon/src/main.rs"),
        "the walk found {} files; is the workspace root {}?",
        files.len(),
        root.display()
    );
    files
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|error| panic!("{file}: {error}"))
}

/// The code of a file that is not test code: everything before its inline
/// `#[cfg(test)] mod … {` (unit tests go at the bottom of a file), and
/// nothing for a file that is itself a test module (see
/// `test_module_files`).
fn production_code<'a>(file: &str, text: &'a str, test_files: &BTreeSet<String>) -> &'a str {
    if test_files.contains(file) {
        return "";
    }
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let next = lines.peek().map_or("", |next| next.trim());
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

/// Whether the attributes right above line `at` (up to the previous item)
/// compile it only for tests: `#[cfg(test)]`, or `#[cfg(any(test, feature
/// = "sim"))]` for the test doubles other crates' tests build.
fn test_only_above(lines: &[&str], at: usize) -> bool {
    let mut attributes = String::new();
    for line in lines[..at].iter().rev().map(|line| line.trim()) {
        if line.is_empty() || line.starts_with("//") || line.ends_with(';') || line.ends_with('}') {
            break;
        }
        attributes.push_str(line);
    }
    attributes.contains("#[cfg(test)]")
        || attributes.contains("#[cfg(any(test, feature = \"sim\"))]")
}

/// Files that are test modules: declared `#[cfg(test)] mod name;` (or
/// `#[cfg(any(test, feature = "sim"))]`, a test double) by their parent (so
/// `name.rs`, or every file under `name/`), or living in a crate's `tests/`
/// directory, or the fuzz targets.
fn test_module_files(files: &[String]) -> BTreeSet<String> {
    let mut tests = BTreeSet::new();
    for file in files {
        if file.contains("/tests/") || file.starts_with("daemon/fuzz/") {
            tests.insert(file.clone());
            continue;
        }
        let text = read(file);
        let lines: Vec<&str> = text.lines().collect();
        // Child modules of `a/mod.rs` or `a/lib.rs` live in `a/`; of `a/b.rs`
        // in `a/b/`.
        let dir = match file.rsplit_once('/') {
            Some((dir, "mod.rs" | "lib.rs" | "main.rs")) => dir.to_string(),
            _ => file.trim_end_matches(".rs").to_string(),
        };
        for (at, line) in lines.iter().enumerate() {
            let declaration = line.trim();
            if test_only_above(&lines, at)
                && let Some(name) = declaration
                    .strip_prefix("mod ")
                    .or_else(|| declaration.strip_prefix("pub mod "))
                    .or_else(|| declaration.strip_prefix("pub(crate) mod "))
                    .and_then(|rest| rest.strip_suffix(';'))
            {
                let single = format!("{dir}/{name}.rs");
                let nested = format!("{dir}/{name}/");
                tests.extend(
                    files
                        .iter()
                        .filter(|candidate| **candidate == single || candidate.starts_with(&nested))
                        .cloned(),
                );
            }
        }
    }
    tests
}

/// Proves every source file opens with a `//!` paragraph saying what it
/// owns (the style guide's first rule for a file).
#[test]
fn every_source_file_opens_with_a_module_doc() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        .filter(|file| !read(file).starts_with("//!"))
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` paragraph (what the file owns and \
         what it must not do):\n{}",
        missing.join("\n")
    );
}

/// Proves nothing below `boot` ends the process or prints (ARCHITECTURE.md:
/// "nothing below `boot` prints or exits"): no `process::exit`,
/// `libc::exit` or `libc::_exit` anywhere in `daemon/src` or the lower
/// crates (`wire/`, `storage/`, `peer/`, `metadata/`) but `main.rs` and
/// `boot.rs`, and no `print!`/`println!`/`eprint!`/`eprintln!` in their
/// production code (tests may print what they measured).
#[test]
fn nothing_below_boot_exits_or_prints() {
    let files = rust_files();
    let tests = test_module_files(&files);
    let mut offences = Vec::new();
    for file in files
        .iter()
        .filter(|file| {
            file.starts_with("daemon/src/")
                || LOWER_CRATES.iter().any(|krate| file.starts_with(krate))
        })
        .filter(|file| !MAY_EXIT_OR_PRINT.contains(&file.as_str()))
    {
        let text = read(file);
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if ["process::exit", "libc::exit(", "libc::_exit("]
                .iter()
                .any(|call| code.contains(call))
            {
                offences.push(format!("{file}:{}: exits: {}", number + 1, line.trim()));
            }
        }
        for (number, line) in production_code(file, &text, &tests).lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if ["print!(", "println!(", "eprint!(", "eprintln!("]
                .iter()
                .any(|call| code.contains(call))
            {
                offences.push(format!("{file}:{}: prints: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "below boot, errors travel up as values to `boot`, which alone prints \
         and turns them into an exit code:\n{}",
        offences.join("\n")
    );
}

/// Proves no source file passes `LINES_MAX` lines except the listed ones,
/// and that the list only shrinks: every listed file still exists and is
/// still too long.
#[test]
fn no_source_file_passes_a_thousand_lines() {
    let files = rust_files();
    let mut offences = Vec::new();
    for file in &files {
        let lines = read(file).lines().count();
        let allowed = LONG_FILES_ALLOWED.contains(&file.as_str());
        if lines > LINES_MAX && !allowed {
            offences.push(format!(
                "{file} has {lines} lines (at most {LINES_MAX}): split it by responsibility"
            ));
        }
        if lines <= LINES_MAX && allowed {
            offences.push(format!(
                "{file} has {lines} lines now: remove it from LONG_FILES_ALLOWED in {}",
                file!()
            ));
        }
    }
    for listed in LONG_FILES_ALLOWED {
        if !files.iter().any(|file| file == listed) {
            offences.push(format!(
                "{listed} is gone: remove it from LONG_FILES_ALLOWED in {}",
                file!()
            ));
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

/// Proves no test skips by printing and returning: a test that cannot run
/// here calls `iggyd_testkit::skip`, which fails under `CI=true`. A print
/// that mentions skipping anywhere else is such a silent skip.
#[test]
fn tests_skip_only_through_the_kit() {
    let mut offences = Vec::new();
    for file in rust_files() {
        if file == "testkit/src/ci.rs" || file == "testkit/tests/tidy.rs" {
            continue;
        }
        let text = read(&file);
        let lines: Vec<&str> = text.lines().collect();
        for (number, line) in lines.iter().enumerate() {
            // Inside string literals (roughly: every other `"`-separated piece).
            let says_skip = line
                .split('"')
                .skip(1)
                .step_by(2)
                .any(|quoted| quoted.to_ascii_lowercase().contains("skip"));
            let in_print = lines[number.saturating_sub(2)..=number]
                .iter()
                .any(|line| line.contains("print!(") || line.contains("println!("));
            if says_skip && in_print {
                offences.push(format!("{file}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "these lines print a skip; call `return iggyd_testkit::skip(\"why\")` instead, \
         so that CI=true fails rather than passes without running:\n{}",
        offences.join("\n")
    );
}

/// Proves the crates that must not link the daemon do not depend on it
/// (`iggyd = …`, `iggyd.workspace = …` or a `[…dependencies.iggyd]` table
/// in their manifest).
#[test]
fn some_crates_never_link_the_daemon() {
    let mut offences = Vec::new();
    for krate in NEVER_LINK_THE_DAEMON {
        let manifest = format!("{krate}/Cargo.toml");
        let text = std::fs::read_to_string(root().join(&manifest))
            .unwrap_or_else(|error| panic!("{manifest}: {error}"));
        for line in text.lines().map(str::trim) {
            let key = line.split(['=', ' ']).next().unwrap_or_default();
            if key == "iggyd" || key == "iggyd.workspace" || line.ends_with("dependencies.iggyd]") {
                offences.push(format!("{manifest}: {line}"));
            }
        }
    }
    assert!(
        offences.is_empty(),
        "these crates must not depend on the daemon (`iggyd`):\n{}",
        offences.join("\n")
    );
}
