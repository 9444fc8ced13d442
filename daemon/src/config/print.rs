//! The effective configuration as a config file: every key of the table, in
//! table order, with its value in the form an operator writes (sizes and
//! durations as exact human strings, derived paths explicitly, the budget as
//! `"auto"` when derived at start, an array of tables as `[[table.key]]`
//! sections). `Config::load` of the output gives back an equal `Config`.
//!
//! Must not: know individual keys; each value is printed by its key's kind
//! from `Config`'s serde form.

use super::keys::{self, KEYS, Kind};
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
        | Kind::Label { .. }
        | Kind::Choice(_) => Toml::from(value.deserialize::<String>().ok()?),
        Kind::TableArray { fields } => {
            let Value::Array(_, items) = value else {
                return None;
            };
            let tables = items.iter().map(|item| {
                let table = item.as_dict()?;
                let fields = fields.iter().filter_map(|field| {
                    let value = printed(field.kind, table.get(field.name))?;
                    Some((field.name.to_string(), value))
                });
                Some(Toml::Table(fields.collect()))
            });
            Toml::Array(tables.collect::<Option<Vec<Toml>>>()?)
        }
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
/// per table in the order its first key appears. A non-empty array of tables
/// follows its table's other keys as one `[[table.key]]` section per table
/// (fields in the key's order), so that no key after it falls into its last
/// table; an empty one is `key = []`.
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
        let (arrays, lines): (Vec<_>, Vec<_>) = lines
            .into_iter()
            .partition(|(_, value)| is_array_of_tables(value));
        for (leaf, value) in lines {
            document.push_str(&line(leaf, value));
        }
        for (leaf, value) in arrays {
            let name = if table.is_empty() {
                leaf.to_string()
            } else {
                format!("{table}.{leaf}")
            };
            let order: Vec<&str> = match keys::find(&name).map(|key| key.kind) {
                Some(Kind::TableArray { fields }) => {
                    fields.iter().map(|field| field.name).collect()
                }
                _ => Vec::new(),
            };
            let Toml::Array(items) = value else { continue };
            for item in items {
                let Toml::Table(mut fields) = item else {
                    continue;
                };
                document.push_str(&format!("\n[[{name}]]\n"));
                for field in &order {
                    if let Some(value) = fields.remove(*field) {
                        document.push_str(&line(field, value));
                    }
                }
                for (field, value) in fields {
                    document.push_str(&line(&field, value));
                }
            }
        }
    }
    document
}

/// `key = value` and a newline, with TOML quoting. A one-entry table
/// cannot fail to print for strings, integers, booleans and arrays.
fn line(key: &str, value: Toml) -> String {
    toml::to_string(&toml::Table::from_iter([(key.to_string(), value)])).unwrap_or_default()
}

/// A non-empty array whose items are all tables: printed as sections.
fn is_array_of_tables(value: &Toml) -> bool {
    matches!(value, Toml::Array(items)
        if !items.is_empty() && items.iter().all(|item| matches!(item, Toml::Table(_))))
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

    // Proves an array of tables prints as `[[…]]` sections after the other
    // keys of its table (a key after them would land in the last node) and
    // before any sub-table, with the fields in the key table's order, and
    // that an empty one stays a plain `key = []`.
    #[test]
    fn array_of_tables_prints_as_sections_after_its_table() {
        let node = |id: i64, address: &str| {
            // Fields given out of order: the key table's order wins.
            Toml::Table(toml::Table::from_iter([
                ("replication_address".to_string(), Toml::from("10.0.0.1:2")),
                ("address".to_string(), Toml::from(address)),
                ("id".to_string(), Toml::Integer(id)),
            ]))
        };
        let entries = vec![
            ("cluster.enabled", Toml::Boolean(true)),
            (
                "cluster.nodes",
                Toml::Array(vec![node(1, "10.0.0.1:1"), node(2, "10.0.0.2:1")]),
            ),
            ("cluster.join", Toml::Boolean(false)),
            ("cluster.tls.ca_file", Toml::from("/ca.pem")),
        ];
        let text = document(entries);
        assert_eq!(
            text,
            "\n[cluster]\nenabled = true\njoin = false\n\n[[cluster.nodes]]\nid = 1\n\
             address = \"10.0.0.1:1\"\nreplication_address = \"10.0.0.1:2\"\n\n\
             [[cluster.nodes]]\nid = 2\naddress = \"10.0.0.2:1\"\n\
             replication_address = \"10.0.0.1:2\"\n\n[cluster.tls]\nca_file = \"/ca.pem\"\n"
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["cluster"]["join"].as_bool(), Some(false));
        assert_eq!(parsed["cluster"]["nodes"][1]["id"].as_integer(), Some(2));
        assert_eq!(
            parsed["cluster"]["tls"]["ca_file"].as_str(),
            Some("/ca.pem")
        );

        let empty = document(vec![("cluster.nodes", Toml::Array(Vec::new()))]);
        assert_eq!(empty, "\n[cluster]\nnodes = []\n");
    }
}
