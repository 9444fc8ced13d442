//! Writes a new cluster's certificates for a local cluster (a script's
//! first step): `cargo run -p iggyd-peer --example cluster-certs --
//! <cluster-name> <directory> <node-id>...` writes `ca.pem` and, per node,
//! `node-<id>.pem` and `node-<id>.key` (mode 0600) into the directory
//! (`ClusterCerts::write_to`), and prints their paths.
//!
//! Must not: overwrite anything (an existing file is an error), or be used
//! for a production CA (the CA key is not kept).

use iggyd_peer::ClusterCerts;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(cluster), Some(dir)) = (args.next(), args.next()) else {
        eprintln!("usage: cluster-certs <cluster-name> <directory> <node-id>...");
        return ExitCode::from(2);
    };
    let mut nodes = Vec::new();
    for arg in args {
        match arg.parse::<u64>() {
            Ok(node) => nodes.push(node),
            Err(error) => {
                eprintln!("cluster-certs: node id {arg:?}: {error}");
                return ExitCode::from(2);
            }
        }
    }
    if nodes.is_empty() {
        eprintln!("cluster-certs: name at least one node id");
        return ExitCode::from(2);
    }
    let dir = PathBuf::from(dir);
    let written = ClusterCerts::generate(&cluster, &nodes).and_then(|certs| certs.write_to(&dir));
    if let Err(error) = written {
        eprintln!("cluster-certs: {error}");
        return ExitCode::FAILURE;
    }
    println!("{}", ClusterCerts::ca_file(&dir).display());
    for node in nodes {
        println!("{}", ClusterCerts::cert_file(&dir, node).display());
        println!("{}", ClusterCerts::key_file(&dir, node).display());
    }
    ExitCode::SUCCESS
}
