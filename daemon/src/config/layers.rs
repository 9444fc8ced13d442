//! The configuration sources as figment providers, merged lowest to highest:
//! built-in defaults < TOML file < `IGGY_ROOT_*` < `IGGYD_*` < flags.
//!
//! Every layer is a `Layer` (a dictionary plus a name) so that figment tags
//! each value with where it came from, and an error can name the file, the
//! environment variable or the flag. Environment variables come from
//! `Sources::env`, never from the process, so tests stay hermetic. This module
//! also owns the unknown-key check (the schema is the key table, `keys`),
//! down to the fields of an array of tables (`cluster.nodes[0].adress`).
//!
//! Must not: interpret values (that is `read`), or read the process
//! environment (only `Sources::env`).

use super::keys::{self, BuiltIn, Field, KEYS, Kind};
use super::{ConfigError, Sources, units};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use std::path::{Path, PathBuf};

/// The default system-wide config file, read only when it exists.
pub(super) const SYSTEM_CONFIG_FILE: &str = "/etc/iggyd/iggyd.toml";

/// The name a layer's values are attributed to when no file is involved.
pub(super) const DEFAULTS_NAME: &str = "built-in defaults";

/// One source of configuration values.
struct Layer {
    metadata: Metadata,
    dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// Merges every source in precedence order. Fails only on an unreadable or
/// malformed file, or a non-UTF-8 `--data-dir`.
pub(super) fn figment(sources: &Sources) -> Result<Figment, ConfigError> {
    let mut figment = Figment::new().merge(defaults());
    if let Some(file) = file_layer(sources.file.as_deref())? {
        figment = figment.merge(file);
    }
    for layer in env_layers(&sources.env) {
        figment = figment.merge(layer);
    }
    for layer in flag_layers(sources)? {
        figment = figment.merge(layer);
    }
    Ok(figment)
}

fn defaults() -> Layer {
    let mut dict = Dict::new();
    for key in KEYS {
        let value = match key.default {
            BuiltIn::Text(text) => Value::from(text),
            BuiltIn::Bool(value) => Value::from(value),
            BuiltIn::Duration(duration) => Value::from(units::format_duration(duration)),
            BuiltIn::Size(bytes) => Value::from(units::format_size(bytes)),
            BuiltIn::Count(count) => Value::from(count),
            BuiltIn::EmptyArray => Value::from(Vec::<Value>::new()),
            // Derived from the final `data_dir` after merging, so that
            // `--data-dir` moves it: absent here on purpose.
            BuiltIn::InDataDir(_) => continue,
        };
        insert(&mut dict, key.name, value);
    }
    Layer {
        metadata: Metadata::named(DEFAULTS_NAME),
        dict,
    }
}

/// The `--config` file, else the system file when it exists. A `--config`
/// file that does not exist is an error: the operator asked for it.
fn file_layer(explicit: Option<&Path>) -> Result<Option<Layer>, ConfigError> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let system = PathBuf::from(SYSTEM_CONFIG_FILE);
            if !system.exists() {
                return Ok(None);
            }
            system
        }
    };
    let file_error = |message: String| ConfigError::File {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|error| file_error(error.to_string()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|error| {
        let message = error.message().replace('\n', " ");
        match error.span() {
            Some(span) => {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                file_error(format!(
                    "invalid TOML at line {line}, column {column}: {message}"
                ))
            }
            None => file_error(format!("invalid TOML: {message}")),
        }
    })?;
    let dict = table
        .into_iter()
        .map(|(key, value)| (key, from_toml(value)))
        .collect();
    Ok(Some(Layer {
        metadata: Metadata::from("TOML file", Source::File(path)),
        dict,
    }))
}

fn from_toml(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => s.into(),
        toml::Value::Integer(i) => i.into(),
        toml::Value::Float(f) => f.into(),
        toml::Value::Boolean(b) => b.into(),
        // No key takes a date; as a string it is reported as a bad value.
        toml::Value::Datetime(d) => d.to_string().into(),
        toml::Value::Array(items) => {
            Value::from(items.into_iter().map(from_toml).collect::<Vec<_>>())
        }
        toml::Value::Table(table) => Value::from(
            table
                .into_iter()
                .map(|(key, value)| (key, from_toml(value)))
                .collect::<Dict>(),
        ),
    }
}

/// One layer per variable, so each value is attributed to its variable.
/// `IGGY_ROOT_*` (Apache Iggy's names) come first so `IGGYD_ROOT__*` wins.
fn env_layers(env: &[(String, String)]) -> Vec<Layer> {
    let mut iggy_root = Vec::new();
    let mut iggyd = Vec::new();
    for (name, raw) in env {
        let key = match name.as_str() {
            "IGGY_ROOT_USERNAME" => "root.username".to_string(),
            "IGGY_ROOT_PASSWORD" => "root.password".to_string(),
            // Like figment's `Env::prefixed`, the prefix and keys ignore case.
            // `get` rather than slicing: a name may start with a multi-byte
            // character. `IGGYD_` alone names no key and is skipped.
            _ if name.len() > 6
                && name
                    .get(..6)
                    .is_some_and(|p| p.eq_ignore_ascii_case("IGGYD_")) =>
            {
                name[6..]
                    .to_ascii_lowercase()
                    .split("__")
                    .collect::<Vec<_>>()
                    .join(".")
            }
            _ => continue,
        };
        let verbatim = keys::find(&key).is_some_and(|key| key.kind.env_verbatim());
        let value = if verbatim {
            Value::from(raw.clone())
        } else {
            // Integers, booleans, `[0, 2]` arrays, else the string: the same
            // parse figment's `Env` applies.
            raw.parse::<Value>().unwrap_or_else(|never| match never {})
        };
        let mut dict = Dict::new();
        insert(&mut dict, &key, value);
        let layer = Layer {
            metadata: Metadata::named(format!("environment variable `{name}`")),
            dict,
        };
        if name.starts_with("IGGY_ROOT_") {
            iggy_root.push((name.clone(), layer));
        } else {
            iggyd.push((name.clone(), layer));
        }
    }
    // Process environment order is arbitrary; sorting makes a clash between,
    // say, `IGGYD_TCP` and `IGGYD_TCP__ADDRESS` resolve the same way each time.
    iggy_root.sort_by(|a, b| a.0.cmp(&b.0));
    iggyd.sort_by(|a, b| a.0.cmp(&b.0));
    iggy_root
        .into_iter()
        .chain(iggyd)
        .map(|(_, layer)| layer)
        .collect()
}

fn flag_layers(sources: &Sources) -> Result<Vec<Layer>, ConfigError> {
    let mut layers = Vec::new();
    if let Some(listen) = sources.listen {
        layers.push(flag_layer("--listen", "tcp.address", listen.to_string()));
    }
    if let Some(data_dir) = &sources.data_dir {
        // Paths travel through the configuration as strings (TOML has no
        // other way to hold them), so a non-UTF-8 path cannot be represented.
        let text = data_dir.to_str().ok_or_else(|| ConfigError::Invalid {
            key: "data_dir".into(),
            value: format!("{data_dir:?}"),
            expected: "a UTF-8 path".into(),
            origin: Some("flag `--data-dir`".into()),
        })?;
        layers.push(flag_layer("--data-dir", "data_dir", text.to_string()));
    }
    Ok(layers)
}

fn flag_layer(flag: &str, key: &str, value: String) -> Layer {
    let mut dict = Dict::new();
    insert(&mut dict, key, value.into());
    Layer {
        metadata: Metadata::named(format!("flag `{flag}`")),
        dict,
    }
}

/// Inserts `value` at dotted `key`, creating (or replacing non-table)
/// intermediate tables.
pub(super) fn insert(dict: &mut Dict, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            dict.insert(key.to_string(), value);
        }
        Some((head, rest)) => {
            let entry = dict
                .entry(head.to_string())
                .or_insert_with(|| Value::from(Dict::new()));
            if entry.as_dict().is_none() {
                *entry = Value::from(Dict::new());
            }
            if let Value::Dict(_, inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// Describes where a value came from: `file `/etc/iggyd/iggyd.toml``,
/// `environment variable `IGGYD_TCP__ADDRESS``, `flag `--listen``, or `None`
/// for a built-in default.
pub(super) fn origin(figment: &Figment, value: &Value) -> Option<String> {
    let metadata = figment.get_metadata(value.tag())?;
    match &metadata.source {
        Some(Source::File(path)) => Some(format!("file `{}`", path.display())),
        _ if metadata.name == DEFAULTS_NAME => None,
        _ => Some(metadata.name.to_string()),
    }
}

/// Rejects keys the key table does not know, anywhere, and tables given as
/// something else. Runs before any value is read so a typo is reported as a
/// typo, not as a missing value.
pub(super) fn check_keys(figment: &Figment, root: &Dict) -> Result<(), ConfigError> {
    check_table(figment, "", root)
}

fn check_table(figment: &Figment, table: &str, dict: &Dict) -> Result<(), ConfigError> {
    for (name, value) in dict {
        let path = if table.is_empty() {
            name.clone()
        } else {
            format!("{table}.{name}")
        };
        if let Some(key) = keys::find(&path) {
            if let (Kind::TableArray { fields }, Value::Array(_, items)) = (key.kind, value) {
                check_fields(figment, &path, items, fields)?;
            }
            continue;
        }
        if !keys::is_table(&path) {
            let candidates = if table.is_empty() {
                keys::all_paths()
            } else {
                keys::children(table)
            };
            return Err(unknown(figment, &path, value, &candidates, true));
        }
        let Some(inner) = value.as_dict() else {
            let fields: Vec<String> = keys::children(&path)
                .iter()
                .map(|child| child[path.len() + 1..].to_string())
                .collect();
            return Err(ConfigError::Invalid {
                key: path.clone(),
                value: super::show(&path, value),
                expected: format!("a table with the keys {}", fields.join(", ")),
                origin: origin(figment, value),
            });
        };
        check_table(figment, &path, inner)?;
    }
    Ok(())
}

/// Rejects fields the tables of an array-of-tables key (`cluster.nodes`) do
/// not have. Elements that are not tables are left to `read`, which says
/// what each must be.
fn check_fields(
    figment: &Figment,
    path: &str,
    items: &[Value],
    fields: &[Field],
) -> Result<(), ConfigError> {
    for (index, item) in items.iter().enumerate() {
        let Some(table) = item.as_dict() else {
            continue;
        };
        let element = format!("{path}[{index}]");
        for (name, value) in table {
            if fields.iter().any(|field| field.name == name) {
                continue;
            }
            let candidates: Vec<String> = fields
                .iter()
                .map(|field| format!("{element}.{}", field.name))
                .collect();
            // Inside one variable's value a field is named as such, never
            // as a variable of its own.
            let key = format!("{element}.{name}");
            return Err(unknown(figment, &key, value, &candidates, false));
        }
    }
    Ok(())
}

/// `key` is not known; `env_names`: suggest the environment variable when
/// the key came from one.
fn unknown(
    figment: &Figment,
    key: &str,
    value: &Value,
    candidates: &[String],
    env_names: bool,
) -> ConfigError {
    let origin = origin(figment, value);
    let from_env = env_names
        && origin
            .as_deref()
            .is_some_and(|o| o.starts_with("environment variable"));
    let similarity = |candidate: &String| {
        let last = candidate.rsplit('.').next().unwrap_or(candidate);
        let flat = candidate.replace('.', "_");
        let key_last = key.rsplit('.').next().unwrap_or(key);
        strsim::jaro_winkler(key, candidate)
            .max(strsim::jaro_winkler(key, &flat))
            .max(strsim::jaro_winkler(key_last, last))
    };
    // `max_by` keeps the last of equal scores: walking the candidates
    // backwards makes a tie go to the key listed first in the table
    // (`address` → `tcp.address`, not `metrics.address`).
    let suggestion = candidates
        .iter()
        .rev()
        .map(|candidate| (similarity(candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| {
            if from_env {
                format!(
                    "IGGYD_{}",
                    candidate.replace('.', "__").to_ascii_uppercase()
                )
            } else {
                candidate.clone()
            }
        });
    let accepted = match key.rsplit_once('.') {
        Some((section, _)) => format!("the keys under `{section}` are {}", candidates.join(", ")),
        None => format!("the top-level keys are {}", keys::children("").join(", ")),
    };
    ConfigError::UnknownKey {
        key: key.to_string(),
        suggestion,
        accepted,
        origin,
    }
}
