//! Layers: the floor order of the workspace's crates and of the daemon's
//! modules, written once in ARCHITECTURE.md (the two tables under
//! "Layers", between `<!-- floors: crates -->` / `<!-- floors: daemon -->`
//! and the next blank line) and checked here. A crate may depend only on
//! crates on lower floors (its `path` dependencies, dev-dependencies
//! included); a module of `daemon/src` may name only modules on lower floors
//! in its `crate::…` paths. The compiler already refuses a cycle between
//! crates; these tests refuse the first upward step, inside the daemon
//! crate too, and say which rule it breaks. They read files only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ lives in the workspace root")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|error| panic!("{relative}: {error}"))
}

/// The floor table after `marker` in ARCHITECTURE.md: each row's floor and
/// the backticked names of its second column (a trailing `/` dropped).
fn floors(marker: &str) -> BTreeMap<String, u32> {
    let text = read("ARCHITECTURE.md");
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no {marker}"));
    let mut table = BTreeMap::new();
    for line in text[start + marker.len()..]
        .lines()
        .skip_while(|line| line.trim().is_empty())
        .take_while(|line| line.trim_start().starts_with('|'))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(floor), Some(names)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            continue; // the header and its rule
        };
        for name in names.split('`').skip(1).step_by(2) {
            table.insert(name.trim_end_matches('/').to_string(), floor);
        }
    }
    assert!(!table.is_empty(), "the table after {marker} is empty");
    table
}

/// The crates a manifest names with `path = "../name"`, in any
/// dependency table.
fn path_dependencies(manifest: &str) -> Vec<String> {
    read(manifest)
        .lines()
        .filter_map(|line| {
            let at = line.find("path = \"../")?;
            let rest = &line[at + "path = \"../".len()..];
            Some(rest.split(['"', '/']).next()?.to_string())
        })
        .collect()
}

/// Every workspace member (`members = [...]` of the root manifest).
fn members() -> Vec<String> {
    let manifest = read("Cargo.toml");
    let start = manifest.find("members = [").expect("a members list");
    let list = &manifest[start
        ..manifest[start..]
            .find(']')
            .map_or(manifest.len(), |end| start + end)];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Proves every workspace member has a floor and depends only on crates on
/// lower floors.
#[test]
fn crates_depend_only_downward() {
    let floors = floors("<!-- floors: crates -->");
    let mut offences = Vec::new();
    for member in members() {
        let Some(&floor) = floors.get(&member) else {
            offences.push(format!(
                "{member}/ has no floor in ARCHITECTURE.md's crate table"
            ));
            continue;
        };
        for dependency in path_dependencies(&format!("{member}/Cargo.toml")) {
            match floors.get(&dependency) {
                Some(&below) if below < floor => {}
                Some(&level) => offences.push(format!(
                    "{member}/ (floor {floor}) depends on {dependency}/ (floor {level}): a crate \
                     may only use crates on lower floors"
                )),
                None => offences.push(format!(
                    "{member}/ depends on {dependency}/, which has no floor in the crate table"
                )),
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

/// The top-level modules a source text names in `crate::…` paths,
/// grouped `use crate::{a, b::c}` included.
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                for item in inner.split(',') {
                    let name = item.trim().split("::").next().unwrap_or_default();
                    if !name.is_empty() {
                        names.push(name.to_string());
                    }
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// Every `.rs` file under `dir` (relative to the root), recursively.
fn rust_files_under(dir: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut stack = vec![root().join(dir)];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).expect("read a source directory") {
            let entry = entry.expect("directory entry");
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let relative = path.strip_prefix(root()).expect("under the root");
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    files
}

/// Proves every module of the daemon crate has a floor and names only
/// modules on lower floors (tests included: a test of a lower module that
/// needs an upper one belongs to the upper one).
#[test]
fn daemon_modules_use_only_lower_floors() {
    let floors = floors("<!-- floors: daemon -->");
    let mut offences = Vec::new();
    for file in rust_files_under("daemon/src") {
        let relative = &file["daemon/src/".len()..];
        if relative == "lib.rs" || relative == "main.rs" {
            continue;
        }
        let module = relative
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        let Some(&floor) = floors.get(&module) else {
            offences.push(format!(
                "daemon/src/{module} has no floor in ARCHITECTURE.md"
            ));
            continue;
        };
        for named in named_modules(&read(&file)) {
            if named == module {
                continue;
            }
            match floors.get(&named) {
                Some(&below) if below < floor => {}
                Some(&level) => offences.push(format!(
                    "{file}: `{module}` (floor {floor}) uses `crate::{named}` (floor {level}): \
                     a module may only use modules on lower floors; move the shared piece down \
                     or reach up through a trait the lower module defines (see shard::front)"
                )),
                None => offences.push(format!(
                    "{file}: uses `crate::{named}`, which has no floor in ARCHITECTURE.md"
                )),
            }
        }
    }
    offences.dedup();
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

/// Proves the parser finds upward steps: a grouped import and a plain path
/// both name their modules.
#[test]
fn named_modules_reads_plain_and_grouped_paths() {
    let text = "use crate::{logging, preflight::Driver};\nlet x = crate::net::Net::new(); // crate::boot\n";
    assert_eq!(named_modules(text), ["logging", "preflight", "net"]);
}

/// Proves ARCHITECTURE.md's code map names every source file of the
/// library crates and the daemon (tests and module roots aside): a file
/// `dir/name.rs` of a crate's `src/` must appear as `` `name.rs` `` (or by
/// its whole path), with its directory named as `` `dir/` ``.
#[test]
fn the_code_map_names_every_module() {
    let map = read("ARCHITECTURE.md");
    let mut missing = Vec::new();
    for krate in ["wire", "storage", "peer", "metadata", "raft", "daemon"] {
        let prefix = format!("{krate}/src/");
        for file in rust_files_under(&prefix) {
            let relative = &file[prefix.len()..];
            let name = relative.rsplit('/').next().unwrap_or(relative);
            let test = name == "tests.rs"
                || name.ends_with("_test.rs")
                || name.ends_with("_tests.rs")
                || relative.contains("tests/");
            if test || matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
                continue;
            }
            let whole = map.contains(&format!("`{relative}`"));
            let named = map.contains(&format!("`{name}`"))
                && relative
                    .rsplit_once('/')
                    .is_none_or(|(dir, _)| map.contains(&format!("`{dir}/`")));
            if !whole && !named {
                missing.push(file);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name these files:\n{}",
        missing.join("\n")
    );
}
