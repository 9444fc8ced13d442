//! Reads and checks every key of the merged figment by its [`Kind`], in the
//! order of the key table, and builds the [`Config`]: each accepted value is
//! put, normalized, into a dictionary shaped like `Config`'s serde form, which
//! is then deserialized. The first refused value is the error; it names the
//! key, shows the value (a secret only by its length), says what is accepted
//! (from the kind and its bounds, with the key's default as the example) and
//! where the value came from.
//!
//! Must not: know individual keys, except for the rules that tie two keys
//! together (`cross_checks`, and `cluster` for the `[cluster]` table's).

mod cluster;

use super::keys::{BuiltIn, Field, KEYS, Key, Kind, Omitted};
use super::units::{self, CPU_ALLOCATION_FORMS, DURATION_FORMS, SIZE_FORMS};
use super::{Config, ConfigError, CpuAllocation, from, layers, show};
use crate::limits::{PU_ID_LIMIT, UNIX_SOCKET_PATH_BYTES_MAX};
use figment::Figment;
use figment::value::{Dict, Empty, Value};
use std::net::SocketAddr;
use std::time::Duration;

const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Reads and checks each key of the merged figment.
pub(super) struct Reader<'a> {
    pub figment: &'a Figment,
    pub root: &'a Value,
}

impl Reader<'_> {
    pub(super) fn config(&self) -> Result<Config, ConfigError> {
        let mut normalized = Dict::new();
        for key in KEYS {
            let value = self.key(key)?;
            layers::insert(&mut normalized, key.name, value);
        }
        self.cross_checks()?;
        let config: Config = Value::from(normalized).deserialize().map_err(|error| {
            // Only a key table that disagrees with `Config` gets here; the
            // tests load every key, so this is a programmer error, reported
            // typed all the same.
            ConfigError::Invalid {
                key: error.path.join("."),
                value: "a checked value".to_string(),
                expected: format!("a value `Config` can hold ({})", error.kind),
                origin: None,
            }
        })?;
        // Over typed values: a node list is easier to compare as `Config`
        // holds it than as figment values.
        self.cluster_checks(&config)?;
        Ok(config)
    }

    /// The normalized value of `key`; `Empty` when it stays unset, so that an
    /// `Option` field reads `None` and its table still exists.
    fn key(&self, key: &Key) -> Result<Value, ConfigError> {
        let name = key.name;
        if self.root.find_ref(name).is_none()
            && let BuiltIn::InDataDir(file) = key.default
        {
            let path = std::path::Path::new(&self.path("data_dir")?).join(file);
            if matches!(key.kind, Kind::SocketPath) {
                check_socket_path(name, &path, || {
                    Some(format!("the default `<data_dir>/{file}`"))
                })?;
            }
            return Ok(Value::from(path.to_string_lossy().into_owned()));
        }
        self.value_of_kind(name, self.value(name)?, key.kind, &example(key))
    }

    /// `value`, given for the key `name`, checked and normalized as `kind`
    /// (a key's kind, the inner kind of an `Optional` one, or a field's
    /// kind in an array of tables). `example` is the "like …" of errors.
    fn value_of_kind(
        &self,
        name: &str,
        value: &Value,
        kind: Kind,
        example: &str,
    ) -> Result<Value, ConfigError> {
        let value = match kind {
            Kind::Optional { inner, empty } => {
                // Exactly "": whitespace is a mistake the inner kind names.
                if let Value::String(_, text) = value
                    && text.is_empty()
                {
                    return Ok(Value::from(Empty::None));
                }
                return self.value_of_kind(name, value, *inner, example).map_err(
                    |error| match error {
                        ConfigError::Invalid {
                            key,
                            value,
                            expected,
                            origin,
                        } => ConfigError::Invalid {
                            key,
                            value,
                            expected: format!("\"\" ({empty}) or {expected}"),
                            origin,
                        },
                        other => other,
                    },
                );
            }
            Kind::Path => Value::from(self.path_of(name, value)?),
            Kind::SocketPath => {
                let path = self.path_of(name, value)?;
                check_socket_path(name, std::path::Path::new(&path), || {
                    layers::origin(self.figment, value)
                })?;
                Value::from(path)
            }
            Kind::Address => Value::from(self.address_of(name, value)?.to_string()),
            Kind::Bool => Value::from(self.boolean_of(name, value)?),
            Kind::Text {
                min, max, empty, ..
            } => Value::from(self.text(name, value, min, max, empty)?),
            Kind::Size { min, max, zero } => {
                Value::from(self.bounded_size(name, value, example, min, max, zero)?)
            }
            Kind::Budget { min, example } => match self.budget(name, value, min, example)? {
                None => Value::from(Empty::None),
                Some(bytes) => Value::from(bytes),
            },
            Kind::Duration { min, max, zero } => {
                serialized(self.bounded_duration(name, value, example, min, max, zero)?)
            }
            Kind::Count { min, max, auto } => {
                match self.count(name, value, example, min, max, auto)? {
                    None => Value::from(Empty::None),
                    Some(count) => Value::from(count),
                }
            }
            Kind::Level => Value::from(self.level(name, value)?),
            Kind::CpuAllocation => serialized(self.cpu_allocation(name, value)?),
            Kind::Choice(words) => Value::from(self.choice(name, value, words)?),
            Kind::Label { max } => Value::from(self.label(name, value, max, example)?),
            Kind::TableArray { fields } => Value::from(self.table_array(name, value, fields)?),
        };
        Ok(value)
    }

    /// An array of tables, each field checked by its kind and reported as
    /// `name[index].field`; a field a table leaves out gets its `Omitted`
    /// value or is refused. (Unknown fields were refused by `layers`.)
    fn table_array(
        &self,
        name: &str,
        value: &Value,
        fields: &[Field],
    ) -> Result<Vec<Value>, ConfigError> {
        let field_names: Vec<&str> = fields.iter().map(|field| field.name).collect();
        let field_names = field_names.join(", ");
        let Value::Array(_, items) = value else {
            return Err(self.fail(
                name,
                value,
                format!(
                    "an array of tables with the keys {field_names} (`[[{name}]]` sections in a \
                     file; `[{{key=value, …}}, …]` in an environment variable)"
                ),
            ));
        };
        let mut tables = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let element = format!("{name}[{index}]");
            let Some(table) = item.as_dict() else {
                return Err(self.fail(
                    &element,
                    item,
                    format!("a table with the keys {field_names}"),
                ));
            };
            let mut normalized = Dict::new();
            for field in fields {
                let key = format!("{element}.{}", field.name);
                let checked = match (table.get(field.name), field.omitted) {
                    (Some(value), _) => {
                        self.value_of_kind(&key, value, field.kind, field.example)?
                    }
                    (
                        None,
                        Some(Omitted::Prefixed {
                            prefix,
                            field: source,
                        }),
                    ) => {
                        let text = match normalized.get(source) {
                            Some(Value::String(_, text)) => text.clone(),
                            Some(Value::Num(_, number)) => number
                                .to_u128()
                                .map(|number| number.to_string())
                                .unwrap_or_default(),
                            _ => String::new(),
                        };
                        Value::from(format!("{prefix}{text}"))
                    }
                    (None, None) => return Err(self.missing(&key, item, field)),
                };
                normalized.insert(field.name.to_string(), checked);
            }
            tables.push(Value::from(normalized));
        }
        Ok(tables)
    }

    /// The error for a required `field` that the table `table` leaves out:
    /// what the field's kind accepts, attributed to where the table came
    /// from.
    fn missing(&self, key: &str, table: &Value, field: &Field) -> ConfigError {
        let nothing = Value::from(Empty::None);
        let expected = match self.value_of_kind(key, &nothing, field.kind, field.example) {
            Err(ConfigError::Invalid { expected, .. }) => expected,
            _ => "a value".to_string(),
        };
        ConfigError::Invalid {
            key: key.to_string(),
            value: "nothing".to_string(),
            expected: format!("{expected} (the key is required)"),
            origin: layers::origin(self.figment, table),
        }
    }

    /// Rules between keys, once every key is accepted on its own.
    fn cross_checks(&self) -> Result<(), ConfigError> {
        let bearer = self.value("metrics.bearer_token_file")?;
        let basic = self.value("metrics.basic_auth_file")?;
        let set =
            |value: &Value| !matches!(value, Value::String(_, text) if text.trim().is_empty());
        if set(bearer) && set(basic) {
            return Err(self.fail(
                "metrics.basic_auth_file",
                basic,
                format!(
                    "\"\" while `metrics.bearer_token_file` is set ({}{}): the metrics endpoint \
                     takes one kind of authentication",
                    show("metrics.bearer_token_file", bearer),
                    from(&layers::origin(self.figment, bearer))
                ),
            ));
        }
        let (file_value, file_bytes) = self.size("logging.max_file_size")?;
        let (total_value, total_bytes) = self.size("logging.max_total_size")?;
        if file_bytes != 0 && total_bytes != 0 && file_bytes > total_bytes {
            let total_origin = from(&layers::origin(self.figment, total_value));
            return Err(self.fail(
                "logging.max_file_size",
                file_value,
                format!(
                    "at most `logging.max_total_size` ({}{total_origin}), or 0 for no per-file \
                     limit",
                    show("logging.max_total_size", total_value)
                ),
            ));
        }
        self.tls_checks()?;
        let (backoff_value, backoff) = self.duration("limits.login_backoff")?;
        let (cap_value, cap) = self.duration("limits.max_login_backoff")?;
        if backoff > cap {
            return Err(self.fail(
                "limits.login_backoff",
                backoff_value,
                format!(
                    "at most `limits.max_login_backoff` ({}{}), or 0 for no delay",
                    show("limits.max_login_backoff", cap_value),
                    from(&layers::origin(self.figment, cap_value))
                ),
            ));
        }
        Ok(())
    }

    /// `tcp.tls.enabled` needs a certificate and its key.
    fn tls_checks(&self) -> Result<(), ConfigError> {
        if !self.boolean("tcp.tls.enabled")? {
            return Ok(());
        }
        for (key, what) in [
            ("tcp.tls.cert_file", "a PEM certificate chain file"),
            ("tcp.tls.key_file", "a PEM private key file"),
        ] {
            let value = self.value(key)?;
            if matches!(value, Value::String(_, text) if text.trim().is_empty()) {
                return Err(self.fail(
                    key,
                    value,
                    format!("{what} when `tcp.tls.enabled` is true"),
                ));
            }
        }
        Ok(())
    }

    fn fail(&self, key: &str, value: &Value, expected: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_string(),
            value: show(key, value),
            expected: expected.into(),
            origin: layers::origin(self.figment, value),
        }
    }

    /// Every key read here has a built-in default or is read only when
    /// present, so a miss means the key table and the defaults disagree.
    fn value(&self, key: &str) -> Result<&Value, ConfigError> {
        self.root.find_ref(key).ok_or_else(|| ConfigError::Invalid {
            key: key.to_string(),
            value: "nothing".to_string(),
            expected: "a value (the built-in default is missing)".to_string(),
            origin: None,
        })
    }

    /// `value` as a string (a one-character string is one too).
    fn string<'v>(
        &self,
        key: &str,
        value: &'v Value,
        expected: &str,
    ) -> Result<(&'v Value, String), ConfigError> {
        match value {
            Value::String(_, s) => Ok((value, s.clone())),
            Value::Char(_, c) => Ok((value, c.to_string())),
            _ => Err(self.fail(key, value, expected)),
        }
    }

    fn path_of(&self, key: &str, value: &Value) -> Result<String, ConfigError> {
        let expected = "a non-empty path";
        let (value, path) = self.string(key, value, expected)?;
        if path.trim().is_empty() || path.contains('\0') {
            return Err(self.fail(key, value, expected));
        }
        Ok(path)
    }

    /// The path `key` holds, for keys read by name.
    fn path(&self, key: &str) -> Result<String, ConfigError> {
        self.path_of(key, self.value(key)?)
    }

    /// A whole number in `min..=max` (an integer, or a string holding one),
    /// or `None` for `"auto"` when `auto` says what that means.
    fn count(
        &self,
        key: &str,
        value: &Value,
        example: &str,
        min: u64,
        max: u64,
        auto: Option<&str>,
    ) -> Result<Option<u64>, ConfigError> {
        let expected = match auto {
            Some(auto) => {
                format!("\"auto\" ({auto}) or a whole number from {min} to {max}, like {example}")
            }
            None => format!("a whole number from {min} to {max}, like {example}"),
        };
        let number = match value {
            Value::String(_, text)
                if auto.is_some() && text.trim().eq_ignore_ascii_case("auto") =>
            {
                return Ok(None);
            }
            Value::String(_, text) => text.trim().parse::<u64>().ok(),
            _ => integer(value).and_then(|i| u64::try_from(i).ok()),
        };
        match number {
            Some(number) if (min..=max).contains(&number) => Ok(Some(number)),
            _ => Err(self.fail(key, value, expected)),
        }
    }

    fn address_of(&self, key: &str, value: &Value) -> Result<SocketAddr, ConfigError> {
        let expected = "an IP address and port, like \"127.0.0.1:8090\" or \"[::]:8090\"";
        let (value, text) = self.string(key, value, expected)?;
        text.trim()
            .parse()
            .map_err(|_| self.fail(key, value, expected))
    }

    fn boolean_of(&self, key: &str, value: &Value) -> Result<bool, ConfigError> {
        match value {
            Value::Bool(_, b) => Ok(*b),
            value => Err(self.fail(key, value, "true or false")),
        }
    }

    /// The boolean `key` holds, for keys read by name.
    fn boolean(&self, key: &str) -> Result<bool, ConfigError> {
        self.boolean_of(key, self.value(key)?)
    }

    /// A string of `min..=max` characters, or `""` when `empty` says what
    /// that means.
    fn text(
        &self,
        key: &str,
        value: &Value,
        min: usize,
        max: usize,
        empty: Option<&str>,
    ) -> Result<String, ConfigError> {
        if empty.is_some()
            && let Value::String(_, text) = value
            && text.is_empty()
        {
            return Ok(String::new());
        }
        let expected = format!("a string of {min} to {max} characters");
        let (value, text) = self.string(key, value, &expected)?;
        if !(min..=max).contains(&text.chars().count()) {
            return Err(self.fail(key, value, expected));
        }
        Ok(text)
    }

    /// A DNS label of 1 to `max` characters, exactly as written: an
    /// upper-case letter is refused rather than folded, so the name in the
    /// file is the name in the certificates.
    fn label(
        &self,
        key: &str,
        value: &Value,
        max: usize,
        example: &str,
    ) -> Result<String, ConfigError> {
        let expected = format!(
            "a name of 1 to {max} characters a-z, 0-9 and '-', starting with a letter and not \
             ending with '-', like \"{example}\""
        );
        let (value, text) = self.string(key, value, &expected)?;
        // The rule the node certificates are checked against at start: a
        // name this accepts must not be refused there.
        let accepted = text.len() <= max && iggyd_peer::identity::ClusterName::new(&text).is_ok();
        if !accepted {
            return Err(self.fail(key, value, expected));
        }
        Ok(text)
    }

    /// Integers are bytes; strings go through the exact unit parser.
    fn size_of(&self, key: &str, value: &Value) -> Result<u64, ConfigError> {
        let bytes = match value {
            Value::String(_, text) => units::parse_size(text),
            _ => integer(value)
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| SIZE_FORMS.to_string()),
        };
        bytes.map_err(|expected| self.fail(key, value, expected))
    }

    /// The size `key` holds, with its value, for keys read by name.
    fn size(&self, key: &str) -> Result<(&Value, u64), ConfigError> {
        let value = self.value(key)?;
        Ok((value, self.size_of(key, value)?))
    }

    fn bounded_size(
        &self,
        key: &str,
        value: &Value,
        example: &str,
        min: u64,
        max: Option<u64>,
        zero: Option<&str>,
    ) -> Result<u64, ConfigError> {
        let bytes = self.size_of(key, value)?;
        let accepted =
            (bytes == 0 && zero.is_some()) || (bytes >= min && max.is_none_or(|max| bytes <= max));
        if !accepted {
            let zero = zero.map_or(String::new(), |zero| format!("0 ({zero}) or "));
            let range = match max {
                Some(max) => format!(
                    "from {} to {}",
                    units::format_size(min),
                    units::format_size(max)
                ),
                None => format!("of at least {}", units::format_size(min)),
            };
            return Err(self.fail(
                key,
                value,
                format!("{zero}a size {range}, like \"{example}\""),
            ));
        }
        Ok(bytes)
    }

    /// Humantime strings; a bare number only when it is 0, because `30`
    /// could mean seconds or milliseconds.
    fn duration_of(&self, key: &str, value: &Value) -> Result<Duration, ConfigError> {
        let duration = match value {
            Value::String(_, text) => units::parse_duration(text),
            _ if integer(value) == Some(0) => Ok(Duration::ZERO),
            _ => Err(DURATION_FORMS.to_string()),
        };
        duration.map_err(|expected| self.fail(key, value, expected))
    }

    /// The duration `key` holds, with its value, for keys read by name.
    fn duration(&self, key: &str) -> Result<(&Value, Duration), ConfigError> {
        let value = self.value(key)?;
        Ok((value, self.duration_of(key, value)?))
    }

    fn bounded_duration(
        &self,
        key: &str,
        value: &Value,
        example: &str,
        min: Duration,
        max: Option<Duration>,
        zero: Option<&str>,
    ) -> Result<Duration, ConfigError> {
        let duration = self.duration_of(key, value)?;
        let accepted = (duration.is_zero() && zero.is_some())
            || (duration >= min && max.is_none_or(|max| duration <= max));
        if !accepted {
            let zero = zero.map_or(String::new(), |zero| format!("0 ({zero}) or "));
            let range = match max {
                Some(max) => {
                    let (min, max) = units::format_duration_range(min, max);
                    format!("from {min} to {max}")
                }
                None => format!("of at least {}", units::format_duration(min)),
            };
            return Err(self.fail(
                key,
                value,
                format!("{zero}a duration {range}, like \"{example}\""),
            ));
        }
        Ok(duration)
    }

    fn budget(
        &self,
        key: &str,
        value: &Value,
        min: u64,
        example: &str,
    ) -> Result<Option<u64>, ConfigError> {
        let expected = format!(
            "\"auto\" or a size of at least {}, like \"{example}\"",
            units::format_size(min)
        );
        if let Value::String(_, text) = value
            && text.trim().eq_ignore_ascii_case("auto")
        {
            return Ok(None);
        }
        match self.size_of(key, value) {
            Ok(bytes) if bytes >= min => Ok(Some(bytes)),
            Ok(_) => Err(self.fail(key, value, expected)),
            Err(_) => Err(self.fail(key, value, format!("{expected}; {SIZE_FORMS}"))),
        }
    }

    fn choice(&self, key: &str, value: &Value, words: &[&str]) -> Result<String, ConfigError> {
        let quoted: Vec<String> = words.iter().map(|word| format!("{word:?}")).collect();
        let expected = match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "nothing".to_string(),
        };
        let (value, text) = self.string(key, value, &expected)?;
        match words.iter().find(|word| **word == text.trim()) {
            Some(word) => Ok((*word).to_string()),
            None => Err(self.fail(key, value, expected)),
        }
    }

    fn level(&self, key: &str, value: &Value) -> Result<String, ConfigError> {
        let expected = "one of trace, debug, info, warn, error, off, or a tracing EnvFilter \
                        directive list like \"info,iggyd::shard=debug\"";
        let (value, text) = self.string(key, value, expected)?;
        let text = text.trim();
        // `EnvFilter` reads a bare word as a target name, so a typo like
        // `infoo` would parse and silently disable logging: a bare word must
        // be a level (a bare target is written `target=trace`).
        let bare_word = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let ok = if bare_word {
            LEVELS.iter().any(|level| level.eq_ignore_ascii_case(text))
        } else {
            tracing_subscriber::EnvFilter::try_new(text).is_ok()
        };
        if !ok {
            let closest = LEVELS
                .iter()
                .map(|level| {
                    (
                        strsim::jaro_winkler(&text.to_ascii_lowercase(), level),
                        level,
                    )
                })
                .filter(|(score, _)| bare_word && *score >= 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let expected = match closest {
                Some((_, level)) => format!("{expected} (did you mean \"{level}\"?)"),
                None => expected.to_string(),
            };
            return Err(self.fail(key, value, expected));
        }
        Ok(text.to_string())
    }

    fn cpu_allocation(&self, key: &str, value: &Value) -> Result<CpuAllocation, ConfigError> {
        let fail = |expected: &str| self.fail(key, value, expected);
        let count = |n: i128| match usize::try_from(n) {
            Ok(n) if (1..=PU_ID_LIMIT as usize).contains(&n) => Ok(CpuAllocation::Count(n)),
            _ => Err(fail(&format!(
                "a shard count from 1 to {PU_ID_LIMIT}, or {CPU_ALLOCATION_FORMS}"
            ))),
        };
        match value {
            Value::String(_, text) => {
                let text = text.trim();
                if text.eq_ignore_ascii_case("physical") {
                    Ok(CpuAllocation::Physical)
                } else if text.eq_ignore_ascii_case("all") {
                    Ok(CpuAllocation::All)
                } else if let Some(range) = units::parse_pu_range(text) {
                    range
                        .map(CpuAllocation::List)
                        .map_err(|expected| fail(&expected))
                } else if let Ok(n) = text.parse::<i128>() {
                    count(n)
                } else {
                    Err(fail(CPU_ALLOCATION_FORMS))
                }
            }
            Value::Array(_, items) => {
                let list_forms = format!(
                    "a non-empty list of distinct PU ids below {PU_ID_LIMIT}, like [0, 2, 4]"
                );
                let mut ids = Vec::with_capacity(items.len());
                for item in items {
                    let id = integer(item)
                        .and_then(|i| u32::try_from(i).ok())
                        .filter(|&id| id < PU_ID_LIMIT)
                        .ok_or_else(|| fail(&list_forms))?;
                    if ids.contains(&id) {
                        return Err(fail(&list_forms));
                    }
                    ids.push(id);
                }
                if ids.is_empty() {
                    return Err(fail(&list_forms));
                }
                Ok(CpuAllocation::List(ids))
            }
            _ => match integer(value) {
                Some(n) => count(n),
                None => Err(fail(CPU_ALLOCATION_FORMS)),
            },
        }
    }
}

/// `admin.socket` and its kind: `sockaddr_un` holds the path and a NUL.
fn check_socket_path(
    key: &str,
    path: &std::path::Path,
    origin: impl FnOnce() -> Option<String>,
) -> Result<(), ConfigError> {
    if path.as_os_str().len() <= UNIX_SOCKET_PATH_BYTES_MAX {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        key: key.into(),
        value: format!("{:?}", path.display().to_string()),
        expected: format!(
            "a Unix socket path of at most {UNIX_SOCKET_PATH_BYTES_MAX} bytes (set `{key}` or \
             use a shorter `data_dir`)"
        ),
        origin: origin(),
    })
}

/// The "like …" of a message: the key's built-in default.
fn example(key: &Key) -> String {
    match key.default {
        BuiltIn::Text(text) => text.to_string(),
        BuiltIn::Bool(value) => value.to_string(),
        BuiltIn::Duration(duration) => units::format_duration(duration),
        BuiltIn::Size(bytes) => units::format_size(bytes),
        BuiltIn::Count(count) => count.to_string(),
        BuiltIn::InDataDir(file) => format!("<data_dir>/{file}"),
        BuiltIn::EmptyArray => "[]".to_string(),
    }
}

/// `value` in the serde form its `Config` field deserializes from. Every
/// value put here is a plain type (durations, addresses, enums) that figment's
/// serializer takes; `Empty` stands in should one ever fail.
fn serialized(value: impl serde::Serialize) -> Value {
    Value::serialize(value).unwrap_or_else(|_| Value::from(Empty::None))
}

/// An integer value of any width and sign, or `None` (floats, strings…).
pub(super) fn integer(value: &Value) -> Option<i128> {
    match value {
        Value::Num(_, n) => n
            .to_i128()
            .or_else(|| n.to_u128().and_then(|u| i128::try_from(u).ok())),
        _ => None,
    }
}
