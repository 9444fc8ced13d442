//! Tests of the `[limits]` and `[tcp.tls]` keys as an operator meets them:
//! their defaults, the forms they accept (counts with `"auto"`, optional
//! paths), the exact error lines for refused values, and the rules that tie
//! two keys together (TLS needs a certificate and a key; the first login
//! backoff is at most its cap). Every load passes a config file, so the
//! machine's `/etc/iggyd/iggyd.toml` is never read (the config tests'
//! `load`).

use super::tests::{load, load_err};
use super::*;

/// With nothing set, every limit has the default `crate::limits` names and
/// TLS is off with no files.
#[test]
fn defaults() {
    let config = load("", &[]).unwrap();
    let limits = &config.limits;
    assert_eq!(limits.max_connections, None);
    assert_eq!(limits.max_connections_per_address, None);
    assert_eq!(limits.max_login_frame_size_bytes, 4096);
    assert_eq!(limits.login_timeout, Duration::from_secs(10));
    assert_eq!(limits.idle_timeout, Duration::from_secs(300));
    assert_eq!(limits.login_threads, 1);
    assert_eq!(limits.max_queued_logins, 64);
    assert_eq!(limits.login_backoff, Duration::from_millis(100));
    assert_eq!(limits.max_login_backoff, Duration::from_secs(5));
    assert_eq!(limits.login_failures_before_close, 3);
    assert_eq!(limits.max_append_bytes_in_flight_bytes, 256 << 20);
    assert_eq!(
        config.tcp.tls,
        TlsConfig {
            enabled: false,
            cert_file: None,
            key_file: None,
            client_ca_file: None,
        }
    );
    let printed = config.to_toml();
    assert!(printed.contains("\n[tcp.tls]\nenabled = false\ncert_file = \"\"\n"));
    assert!(printed.contains("max_connections = \"auto\"\n"));
    assert!(printed.contains("login_threads = 1\n"));
    assert!(printed.contains("max_login_frame_size = \"4 KiB\"\n"));
}

/// Every limit is set from a file and from the environment (numbers as
/// integers or strings), and `iggyd config` prints what loads back equal.
#[test]
fn set_and_round_trip() {
    let toml = "[tcp.tls]\nenabled = true\ncert_file = \"/etc/c.pem\"\n\
                key_file = \"$CREDENTIALS_DIRECTORY/k.pem\"\nclient_ca_file = \"ca.pem\"\n\
                [limits]\nmax_connections = 500\nmax_connections_per_address = \"20\"\n\
                max_login_frame_size = \"2 KiB\"\nlogin_timeout = \"3 s\"\nidle_timeout = 0\n\
                login_threads = 2\nmax_queued_logins = 8\nlogin_backoff = 0\n\
                max_login_backoff = \"1 s\"\nlogin_failures_before_close = 1\n\
                max_append_bytes_in_flight = \"64 MiB\"\n";
    let config = load(toml, &[("IGGYD_LIMITS__LOGIN_THREADS", "3")]).unwrap();
    assert_eq!(config.limits.max_connections, Some(500));
    assert_eq!(config.limits.max_connections_per_address, Some(20));
    assert_eq!(config.limits.max_login_frame_size_bytes, 2048);
    assert_eq!(config.limits.idle_timeout, Duration::ZERO);
    assert_eq!(config.limits.login_threads, 3);
    assert_eq!(config.limits.login_backoff, Duration::ZERO);
    assert_eq!(
        config.tcp.tls.key_file,
        Some(PathBuf::from("$CREDENTIALS_DIRECTORY/k.pem"))
    );
    let printed = config.to_toml();
    let again = load(&printed, &[]).unwrap();
    assert_eq!(again, config, "{printed}");
}

/// Refused values name the key, the value and what is accepted.
#[test]
fn refused_values() {
    let message = load_err("[limits]\nmax_connections = 0\n", &[]);
    assert!(
        message.ends_with(
            ": 0 is not accepted; expected \"auto\" (derived from RLIMIT_NOFILE) or a whole \
             number from 1 to 16777216, like auto"
        ),
        "{message}"
    );
    let message = load_err("[limits]\nmax_connections = \"many\"\n", &[]);
    assert!(
        message.starts_with("config key `limits.max_connections` from file `"),
        "{message}"
    );
    assert!(
        message.ends_with(
            ": \"many\" is not accepted; expected \"auto\" (derived from RLIMIT_NOFILE) or a \
             whole number from 1 to 16777216, like auto"
        ),
        "{message}"
    );
    assert_eq!(
        load_err("", &[("IGGYD_LIMITS__LOGIN_THREADS", "0")]),
        "config key `limits.login_threads` from environment variable \
         `IGGYD_LIMITS__LOGIN_THREADS`: 0 is not accepted; expected a whole number from 1 to \
         64, like 1"
    );
    assert_eq!(
        load_err("", &[("IGGYD_LIMITS__MAX_LOGIN_FRAME_SIZE", "100")]),
        "config key `limits.max_login_frame_size` from environment variable \
         `IGGYD_LIMITS__MAX_LOGIN_FRAME_SIZE`: 100 is not accepted; expected a size of at least \
         1 KiB, like \"4 KiB\""
    );
    assert_eq!(
        load_err("", &[("IGGYD_LIMITS__MAX_APPEND_BYTES_IN_FLIGHT", "1 MiB")]),
        "config key `limits.max_append_bytes_in_flight` from environment variable \
         `IGGYD_LIMITS__MAX_APPEND_BYTES_IN_FLIGHT`: \"1 MiB\" is not accepted; expected a size \
         of at least 64 MiB, like \"256 MiB\""
    );
    assert_eq!(
        load_err("", &[("IGGYD_LIMITS__LOGIN_TIMEOUT", "0")]),
        "config key `limits.login_timeout` from environment variable \
         `IGGYD_LIMITS__LOGIN_TIMEOUT`: 0 is not accepted; expected a duration from 1 s to \
         1 h, like \"10 s\""
    );
    assert_eq!(
        load_err("", &[("IGGYD_TCP__TLS__CERT_FILE", " ")]),
        "config key `tcp.tls.cert_file` from environment variable `IGGYD_TCP__TLS__CERT_FILE`: \
         \" \" is not accepted; expected \"\" (none) or a non-empty path"
    );
}

/// TLS needs its certificate and key; the first backoff is at most the cap.
#[test]
fn rules_between_keys() {
    assert_eq!(
        load_err("", &[("IGGYD_TCP__TLS__ENABLED", "true")]),
        "config key `tcp.tls.cert_file`: \"\" is not accepted; expected a PEM certificate \
         chain file when `tcp.tls.enabled` is true"
    );
    assert_eq!(
        load_err(
            "",
            &[
                ("IGGYD_TCP__TLS__ENABLED", "true"),
                ("IGGYD_TCP__TLS__CERT_FILE", "c.pem")
            ]
        ),
        "config key `tcp.tls.key_file`: \"\" is not accepted; expected a PEM private key file \
         when `tcp.tls.enabled` is true"
    );
    // Files without TLS enabled are kept (an operator may stage them).
    assert!(load("", &[("IGGYD_TCP__TLS__CERT_FILE", "c.pem")]).is_ok());
    assert_eq!(
        load_err(
            "",
            &[
                ("IGGYD_LIMITS__LOGIN_BACKOFF", "2 s"),
                ("IGGYD_LIMITS__MAX_LOGIN_BACKOFF", "1 s")
            ]
        ),
        "config key `limits.login_backoff` from environment variable \
         `IGGYD_LIMITS__LOGIN_BACKOFF`: \"2 s\" is not accepted; expected at most \
         `limits.max_login_backoff` (\"1 s\" from environment variable \
         `IGGYD_LIMITS__MAX_LOGIN_BACKOFF`), or 0 for no delay"
    );
    // The certificate files reload live; enabling TLS needs a restart.
    assert!(applies_live("tcp.tls.cert_file"));
    assert!(applies_live("tcp.tls.key_file"));
    assert!(applies_live("tcp.tls.client_ca_file"));
    assert!(!applies_live("tcp.tls.enabled"));
    assert!(!applies_live("limits.max_connections"));
}

/// The metadata-growth bounds: defaults from `crate::limits`, values in
/// range taken, out of range refused with the range in the message.
#[test]
fn metadata_growth_bounds() {
    let limits = load("", &[]).unwrap().limits;
    assert_eq!(limits.max_consumer_groups_per_topic, 1024);
    assert_eq!(limits.max_members_per_group, 4096);
    assert_eq!(limits.max_metadata_record_size_bytes, 1 << 20);
    let limits = load(
        "[limits]\nmax_consumer_groups_per_topic = 3\nmax_members_per_group = 1\n\
         max_metadata_record_size = \"16 MiB\"\n",
        &[],
    )
    .unwrap()
    .limits;
    assert_eq!(
        (
            limits.max_consumer_groups_per_topic,
            limits.max_members_per_group,
            limits.max_metadata_record_size_bytes
        ),
        (3, 1, 16 << 20)
    );
    assert_eq!(
        load_err("", &[("IGGYD_LIMITS__MAX_METADATA_RECORD_SIZE", "17 MiB")]),
        "config key `limits.max_metadata_record_size` from environment variable \
         `IGGYD_LIMITS__MAX_METADATA_RECORD_SIZE`: \"17 MiB\" is not accepted; expected a size \
         from 4 KiB to 16 MiB, like \"1 MiB\""
    );
    assert!(
        load_err("", &[("IGGYD_LIMITS__MAX_MEMBERS_PER_GROUP", "0")])
            .contains("a whole number from 1 to 65536")
    );
}
