//! `iggy-top`: the live console for iggyd, attached over the daemon's admin
//! Unix socket. This crate never links the daemon; it speaks the socket's
//! versioned JSON only. For now it resolves the socket path the way the
//! dashboard will and reports whether a daemon answers there; the dashboard
//! itself is built on top of this connection.

use clap::Parser;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Where the packaged daemon puts its admin socket.
const PACKAGED_SOCKET: &str = "/run/iggyd/iggyd.sock";
/// Where a daemon run from a checkout with its defaults puts it.
const LOCAL_SOCKET: &str = "local_data/iggyd.sock";

#[derive(Debug, Parser)]
#[command(name = "iggy-top", version, about = "Live console for iggyd")]
struct Cli {
    /// Admin socket of the daemon (default: the packaged path, then ./local_data/iggyd.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

fn default_socket() -> PathBuf {
    let packaged = PathBuf::from(PACKAGED_SOCKET);
    if packaged.exists() {
        packaged
    } else {
        PathBuf::from(LOCAL_SOCKET)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let socket = cli.socket.unwrap_or_else(default_socket);
    match hello(&socket) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "iggy-top: no iggyd answers on {}: {error}",
                socket.display()
            );
            ExitCode::FAILURE
        }
    }
}

/// Send the v1 `hello` request and return the daemon's one-line answer.
fn hello(socket: &std::path::Path) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let request = serde_json::json!({"v": 1, "op": "hello"});
    writeln!(stream, "{request}")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}
