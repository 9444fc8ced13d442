//! The effective configuration as a config file: every key of the table, in
//! table order, with its value in the form an operator writes (sizes and
//! durations as exact human strings, derived paths explicitly, the budget as
//! `"auto"` when derived at start). `Config::load` of the output gives back
//! an equal `Config`.
//!
//! Must not: know individual keys; each value is printed by its key's kind
//! from `Config`'s serde form.

use super::keys::{KEYS, Kind};
use super::{Config, CpuAllocation, units};
use figment::value::Value;
use std::time::Duration;
use toml::Value as Toml;

/// `(key, value)` for every key that has a value, in table order.
pub(super) fn entries(config: &Config) -> Vec<(&'static str, Toml)> {
    let Ok(serialized) = Value::serialize(config) else {
        return Vec::new();
    };
    KEYS.iter()
        .filter_map(|key| {
            let value = serialized
                .find_ref(key.name)
                .filter(|value| !matches!(value, Value::Empty(..)));
            Some((key.name, printed(key.kind, value)?))
        })
        .collect()
}

/// `value` (`None`: unset) as a file would hold it; `None` to leave it out.
fn printed(kind: Kind, value: Option<&Value>) -> Option<Toml> {
    // Unset optional values print as the word that unsets them, so every
    // key appears in the output.
    if let (Kind::Count { auto: Some(_), .. }, None) = (kind, value) {
        return Some(Toml::from("auto"));
    }
    if let Kind::Budget { .. } = kind {
        return Some(
            match value.and_then(|value| value.deserialize::<u64>().ok()) {
                None => Toml::from("auto"),
                Some(bytes) => Toml::from(units::format_size(bytes)),
            },
        );
    }
    if let Kind::Optional { inner, .. } = kind {
        return match value {
            None => Some(Toml::from("")),
            Some(value) => printed(*inner, Some(value)),
        };
    }
    let value = value?;
    let printed = match kind {
        Kind::Optional { .. } => return None,
        Kind::Path
        | Kind::SocketPath
        | Kind::Address
        | Kind::Text { .. }
        | Kind::Level
        | Kind::Choice(_) => Toml::from(value.deserialize::<String>().ok()?),
        Kind::Bool => Toml::Boolean(value.deserialize::<bool>().ok()?),
        Kind::Count { .. } => {
            Toml::Integer(i64::try_from(value.deserialize::<u64>().ok()?).unwrap_or(i64::MAX))
        }
        Kind::Size { .. } | Kind::Budget { .. } => {
            Toml::from(units::format_size(value.deserialize::<u64>().ok()?))
        }
        Kind::Duration { .. } => Toml::from(units::format_duration(
            value.deserialize::<Duration>().ok()?,
        )),
        Kind::CpuAllocation => match value.deserialize::<CpuAllocation>().ok()? {
            CpuAllocation::Physical => Toml::from("physical"),
            CpuAllocation::All => Toml::from("all"),
            CpuAllocation::Count(n) => Toml::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
            CpuAllocation::List(ids) => {
                Toml::Array(ids.iter().map(|&id| Toml::Integer(i64::from(id))).collect())
            }
        },
    };
    Some(printed)
}

/// The entries as a TOML document: top-level keys first, then one `[table]`
/// per table in the order its first key appears.
pub(super) fn document(entries: Vec<(&'static str, Toml)>) -> String {
    let mut tables: Vec<(&str, Vec<(&str, Toml)>)> = Vec::new();
    for (name, value) in entries {
        let (table, leaf) = name.rsplit_once('.').unwrap_or(("", name));
        match tables.iter_mut().find(|(known, _)| *known == table) {
            Some((_, lines)) => lines.push((leaf, value)),
            None => tables.push((table, vec![(leaf, value)])),
        }
    }
    // The top level must come before any table header.
    tables.sort_by_key(|(table, _)| !table.is_empty());
    let mut document = String::new();
    for (table, lines) in tables {
        if !table.is_empty() {
            document.push_str(&format!("\n[{table}]\n"));
        }
        for (leaf, value) in lines {
            // A one-entry table prints as `key = value` with TOML quoting;
            // that cannot fail for strings, integers, booleans and arrays.
            let line = toml::to_string(&toml::Table::from_iter([(leaf.to_string(), value)]))
                .unwrap_or_default();
            document.push_str(&line);
        }
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the document puts the top level first and gives a nested table
    // (`tcp.tls`) its own header after its parent, so it reads back as TOML
    // with the same dotted keys.
    #[test]
    fn nested_tables_get_their_own_header() {
        let entries = vec![
            ("tcp.address", Toml::from("127.0.0.1:1")),
            ("tcp.tls.cert_file", Toml::from("/c.pem")),
            ("data_dir", Toml::from("d")),
            ("tcp.nodelay", Toml::Boolean(true)),
        ];
        let text = document(entries);
        assert_eq!(
            text,
            "data_dir = \"d\"\n\n[tcp]\naddress = \"127.0.0.1:1\"\nnodelay = true\n\n\
             [tcp.tls]\ncert_file = \"/c.pem\"\n"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["tcp"]["tls"]["cert_file"].as_str(), Some("/c.pem"));
    }
}
