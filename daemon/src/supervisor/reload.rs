//! SIGHUP: the configuration read again and diffed against what runs; the
//! keys that apply live (log level and limits, the drain timeout, the TLS
//! certificate files) are applied, the others logged as needing a restart.
//! An invalid configuration, or certificate files that do not load, leave
//! the running one in place.

use super::Reload;
use crate::config::Config;
use crate::logging::LimitsUpdate;
use crate::systemd;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Flatten a configuration to `dotted.key = value` pairs, for diffs.
fn flatten(config: &Config) -> BTreeMap<String, String> {
    config
        .entries()
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// SIGHUP: returns the new drain timeout when the reload was applied.
pub(super) fn reload_config(reload: &mut Reload, headline: &str) -> Option<Duration> {
    systemd::reloading("reloading configuration");
    let outcome = match Config::load(&reload.sources) {
        Err(error) => {
            tracing::error!(%error, "reload rejected: keeping the running configuration");
            None
        }
        Ok(next) => {
            let Changes {
                mut applied,
                restart,
            } = changes(&reload.config, &next);
            // The certificate files are read again on every reload (a
            // rotation keeps the paths); a pair that does not load leaves
            // the running one in place, and its key changes are refused.
            let tls_refused = reload_tls(reload, &next);
            if tls_refused {
                applied.retain(|change| !change.starts_with("tcp.tls."));
            }
            let cluster_tls_refused = reload_cluster_tls(reload, &next);
            if cluster_tls_refused {
                applied.retain(|change| !change.starts_with("cluster.tls."));
            }
            if let Err(error) = reload.log.set_level(&next.logging.level) {
                tracing::error!(%error, "reload: the new log level was refused");
            }
            match reload.log.update_limits(&next.logging) {
                Ok(LimitsUpdate::Applied) => {}
                Ok(needs_restart) => tracing::warn!(%needs_restart, "reload"),
                Err(error) => tracing::error!(%error, "reload: new log limits were refused"),
            }
            for change in &applied {
                tracing::info!(change = %change, "reload: applied");
            }
            for change in &restart {
                tracing::warn!(change = %change, "reload: needs a restart to take effect");
            }
            if applied.is_empty() && restart.is_empty() {
                tracing::info!("reload: configuration unchanged");
            }
            reload.config = now_running(&reload.config, &next, tls_refused, cluster_tls_refused);
            Some(next.shutdown.drain_timeout)
        }
    };
    systemd::ready(headline);
    outcome
}

/// SIGHUP with TLS on: load `next`'s certificate files and swap them in
/// for new connections. Returns true when they were refused (logged with
/// the reason; the running pair stays).
fn reload_tls(reload: &Reload, next: &Config) -> bool {
    let Some(cell) = &reload.tls else {
        return false;
    };
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    // `enabled` needs a restart: load the files the next config names, as
    // if TLS stays on.
    let wanted = crate::config::TlsConfig {
        enabled: true,
        ..next.tcp.tls.clone()
    };
    let running = cell.description();
    match crate::net::tls::load(&wanted, credentials.as_deref()) {
        Ok(loaded) if loaded.description == running => {
            cell.replace(loaded);
            tracing::info!(certificate = %running, "reload: TLS certificate unchanged");
            false
        }
        Ok(loaded) => {
            tracing::info!(
                certificate = %loaded.description,
                was = %running,
                "reload: TLS certificate applied; new connections use it, open ones keep theirs"
            );
            cell.replace(loaded);
            false
        }
        Err(error) => {
            tracing::error!(
                %error,
                kept = %running,
                "reload: TLS certificate refused, keeping the running one"
            );
            true
        }
    }
}

/// SIGHUP on a cluster node: load the `[cluster.tls]` files `next` names
/// (the running node's id and cluster name: those need a restart) and
/// swap them in for new node-to-node connections. Returns true when they
/// were refused (logged with the reason; the running identity stays).
fn reload_cluster_tls(reload: &Reload, next: &Config) -> bool {
    let Some(identity) = &reload.cluster_tls else {
        return false;
    };
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    let wanted = crate::config::ClusterConfig {
        tls: next.cluster.tls.clone(),
        ..reload.config.cluster.clone()
    };
    let loaded = crate::cluster::node::NodeSetup::load_tls(&wanted, credentials.as_deref())
        .and_then(|loaded| identity.replace(&loaded).map_err(|error| error.to_string()));
    match loaded {
        Ok(iggyd_peer::Replaced::Unchanged) => {
            tracing::info!("reload: cluster certificate unchanged");
            false
        }
        Ok(iggyd_peer::Replaced::Applied) => {
            tracing::info!(
                "reload: cluster certificate applied; new node-to-node connections use it, \
                 open ones keep theirs"
            );
            false
        }
        Err(error) => {
            tracing::error!(
                %error,
                "reload: cluster certificate refused, keeping the running one"
            );
            true
        }
    }
}

/// The keys a reload changes, as `key: old -> new` lines.
struct Changes {
    /// Keys that apply while running.
    applied: Vec<String>,
    /// Keys that take effect only after a restart.
    restart: Vec<String>,
}

/// What changes from `before` to `after`, key by key.
fn changes(before: &Config, after: &Config) -> Changes {
    let before = flatten(before);
    let after = flatten(after);
    let mut changes = Changes {
        applied: Vec::new(),
        restart: Vec::new(),
    };
    for key in before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (old, new) = (before.get(key), after.get(key));
        if old == new {
            continue;
        }
        let old = old.map_or("(unset)", String::as_str);
        let new = new.map_or("(unset)", String::as_str);
        if !crate::config::applies_live(key) {
            changes.restart.push(format!("{key}: {old} -> {new}"));
        } else {
            changes.applied.push(format!("{key}: {old} -> {new}"));
        }
    }
    changes
}

/// The configuration that runs after a reload to `next`: the live keys
/// from `next` (the TLS files only when they loaded), the running values of
/// restart-only keys, so a later reload diffs against what actually runs.
fn now_running(
    running: &Config,
    next: &Config,
    tls_refused: bool,
    cluster_tls_refused: bool,
) -> Config {
    let mut running = running.clone();
    running.logging.level = next.logging.level.clone();
    running.logging.max_file_size_bytes = next.logging.max_file_size_bytes;
    running.logging.max_total_size_bytes = next.logging.max_total_size_bytes;
    running.logging.retention = next.logging.retention;
    running.logging.rotation_check_interval = next.logging.rotation_check_interval;
    running.shutdown.drain_timeout = next.shutdown.drain_timeout;
    if !tls_refused {
        running.tcp.tls.cert_file = next.tcp.tls.cert_file.clone();
        running.tcp.tls.key_file = next.tcp.tls.key_file.clone();
        running.tcp.tls.client_ca_file = next.tcp.tls.client_ca_file.clone();
    }
    if running.cluster.enabled && !cluster_tls_refused {
        running.cluster.tls = next.cluster.tls.clone();
    }
    running
}
