//! Unit tests of the file descriptor store's pure parts and of the socket
//! checks, on real sockets of this process.

use super::*;
use std::os::fd::AsFd;

#[test]
fn listen_env_for_this_process_names_descriptors_from_3() {
    let listed = parse_listen_env(Some("42"), Some("3"), Some("iggy-0:iggy-1:admin"), 42).unwrap();
    assert_eq!(
        listed,
        vec![
            (3, "iggy-0".to_string()),
            (4, "iggy-1".to_string()),
            (5, "admin".to_string())
        ]
    );
    let unnamed = parse_listen_env(Some("42"), Some("2"), None, 42).unwrap();
    assert_eq!(
        unnamed,
        vec![(3, "unknown".to_string()), (4, "unknown".to_string())]
    );
    assert!(
        parse_listen_env(Some("42"), Some("0"), Some(""), 42)
            .unwrap_err()
            .contains("LISTEN_FDNAMES")
    );
    assert_eq!(
        parse_listen_env(Some("42"), Some("0"), None, 42),
        Ok(vec![])
    );
}

/// Proves what is not addressed to this process, or not set, gives
/// nothing, and every malformed value is an error naming the variable
/// (never a panic, never a descriptor guessed).
#[test]
fn listen_env_garbage_is_refused_with_the_variable_named() {
    assert_eq!(parse_listen_env(None, Some("2"), None, 42), Ok(vec![]));
    assert_eq!(parse_listen_env(Some("42"), None, None, 42), Ok(vec![]));
    assert_eq!(parse_listen_env(Some("7"), Some("2"), None, 42), Ok(vec![]));
    for (pid, count, names, needle) in [
        ("x", "1", None, "LISTEN_PID"),
        ("-1", "1", None, "LISTEN_PID"),
        ("42", "two", None, "LISTEN_FDS"),
        ("42", "-3", None, "LISTEN_FDS"),
        ("42", "", None, "LISTEN_FDS"),
        ("42", "18446744073709551616", None, "LISTEN_FDS"),
        ("42", "4294967296", None, "LISTEN_FDS"),
        ("42", "2", Some("one"), "LISTEN_FDNAMES"),
        ("42", "1", Some("a:b"), "LISTEN_FDNAMES"),
    ] {
        let error = parse_listen_env(Some(pid), Some(count), names, 42).unwrap_err();
        assert!(error.contains(needle), "{pid} {count} {names:?}: {error}");
    }
}

#[test]
fn the_store_is_on_only_under_a_manager_that_keeps_descriptors() {
    assert!(!FdStore::detect(false, Some("16"), Some("42"), 42).is_enabled());
    let told = FdStore::detect(true, Some("16"), None, 42);
    assert!(told.is_enabled());
    assert_eq!(told.max(), Some(16));
    assert!(!FdStore::detect(true, Some("0"), Some("42"), 42).is_enabled());
    assert!(!FdStore::detect(true, Some("lots"), Some("42"), 42).is_enabled());
    // systemd < 254: started by systemd itself, or not.
    let assumed = FdStore::detect(true, None, Some("42"), 42);
    assert!(assumed.is_enabled());
    assert_eq!(assumed.max(), None);
    assert!(!FdStore::detect(true, None, Some("7"), 42).is_enabled());
    assert!(!FdStore::detect(true, None, Some("x"), 42).is_enabled());
    assert!(!FdStore::detect(true, None, None, 42).is_enabled());
}

#[test]
fn port_zero_in_the_configuration_matches_any_port_on_the_same_ip() {
    let bound: SocketAddr = "127.0.0.1:8090".parse().unwrap();
    assert!(address_matches(bound, "127.0.0.1:8090".parse().unwrap()));
    assert!(address_matches(bound, "127.0.0.1:0".parse().unwrap()));
    assert!(!address_matches(bound, "127.0.0.1:8091".parse().unwrap()));
    assert!(!address_matches(bound, "0.0.0.0:8090".parse().unwrap()));
    assert!(!address_matches(bound, "[::1]:8090".parse().unwrap()));
}

fn reuseport_listener(address: &str) -> TcpListener {
    use socket2::{Domain, Protocol};
    let address: SocketAddr = address.parse().unwrap();
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&address.into()).unwrap();
    socket.listen(16).unwrap();
    socket.into()
}

fn owned_dup(fd: BorrowedFd<'_>) -> OwnedFd {
    fd.try_clone_to_owned().unwrap()
}

/// Proves a stored listener is taken when it listens on the configured
/// address with SO_REUSEPORT, and refused, with the reason, when the
/// address, the port, the kind or the listening state differ.
#[test]
fn a_tcp_listener_is_taken_only_when_it_fits() {
    let listener = reuseport_listener("127.0.0.1:0");
    let bound = listener.local_addr().unwrap();
    let taken = adopt_tcp(owned_dup(listener.as_fd()), bound, true, true).unwrap();
    assert_eq!(taken.local_addr().unwrap(), bound);
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert!(adopt_tcp(owned_dup(listener.as_fd()), any_port, true, false).is_ok());

    let elsewhere = SocketAddr::new(bound.ip(), bound.port().wrapping_add(1).max(1));
    let why = adopt_tcp(owned_dup(listener.as_fd()), elsewhere, true, true).unwrap_err();
    assert!(why.contains("bound to"), "{why}");

    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let why = adopt_tcp(owned_dup(plain.as_fd()), any_port, true, true).unwrap_err();
    assert!(why.contains("SO_REUSEPORT"), "{why}");
    assert!(adopt_tcp(owned_dup(plain.as_fd()), any_port, false, true).is_ok());

    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let why = adopt_tcp(owned_dup(udp.as_fd()), any_port, true, true).unwrap_err();
    assert!(why.contains("not a stream socket"), "{why}");

    let connected = std::net::TcpStream::connect(bound).unwrap();
    let why = adopt_tcp(owned_dup(connected.as_fd()), any_port, true, true).unwrap_err();
    assert!(why.contains("not listening"), "{why}");

    let file = std::fs::File::open("/dev/null").unwrap();
    let why = adopt_tcp(owned_dup(file.as_fd()), any_port, true, true).unwrap_err();
    assert!(why.contains("not a socket"), "{why}");
}

/// Proves a socket filter left on a stored listener is removed when it is
/// taken back.
#[test]
fn a_taken_listener_loses_any_socket_filter() {
    let listener = reuseport_listener("127.0.0.1:0");
    let socket = socket2::SockRef::from(&listener);
    let drop_all = [socket2::SockFilter::new(
        (libc::BPF_RET | libc::BPF_K) as u16,
        0,
        0,
        0,
    )];
    // Classic socket filters need no privilege on the kernels this runs on;
    // where one is refused the check below still proves the listener serves.
    let _ = socket.attach_filter(&drop_all);
    let bound = listener.local_addr().unwrap();
    let taken = adopt_tcp(owned_dup(listener.as_fd()), bound, true, false).unwrap();
    // With the filter gone, a handshake completes and is accepted at once.
    let _client = std::net::TcpStream::connect_timeout(&bound, std::time::Duration::from_secs(5))
        .expect("connects");
    let (_stream, _) = taken.accept().expect("accepted");
}

#[test]
fn a_unix_listener_is_taken_only_on_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let listener = UnixListener::bind(&path).unwrap();
    assert!(adopt_unix(owned_dup(listener.as_fd()), &path).is_ok());
    let other = dir.path().join("other.sock");
    let why = adopt_unix(owned_dup(listener.as_fd()), &other).unwrap_err();
    assert!(why.contains("bound to"), "{why}");
    std::fs::remove_file(&path).unwrap();
    let why = adopt_unix(owned_dup(listener.as_fd()), &path).unwrap_err();
    assert!(why.contains("admin.sock"), "{why}");
    std::fs::write(&path, b"").unwrap();
    let why = adopt_unix(owned_dup(listener.as_fd()), &path).unwrap_err();
    assert!(why.contains("no longer a socket"), "{why}");
}

/// Proves the shards' group takes every stored listener that fits, binds
/// the missing ones on the port they share, and rebinds one that does not
/// fit; what is left over is the caller's to discard.
#[test]
fn the_shards_group_takes_what_fits_and_binds_the_rest_on_the_same_port() {
    let first = reuseport_listener("127.0.0.1:0");
    let port = first.local_addr().unwrap().port();
    let mut inherited = Inherited::default();
    inherited
        .fds
        .insert(iggy_name(0), vec![owned_dup(first.as_fd())]);
    let stray = TcpListener::bind("127.0.0.1:0").unwrap();
    inherited
        .fds
        .insert(iggy_name(2), vec![owned_dup(stray.as_fd())]);
    inherited
        .fds
        .insert(iggy_name(5), vec![owned_dup(stray.as_fd())]);
    let store = FdStore::off("test");
    let mut bound = Vec::new();
    let wanted: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let group = iggy_listeners(&mut inherited, &store, wanted, 3, |address| {
        bound.push(address);
        Ok(reuseport_listener(&address.to_string()))
    })
    .unwrap();
    assert_eq!(group.taken, 1);
    assert_eq!(group.address.port(), port);
    assert_eq!(group.listeners.len(), 3);
    for listener in &group.listeners {
        assert_eq!(listener.local_addr().unwrap().port(), port);
    }
    // Shard 1 was missing and shard 2's did not fit (no SO_REUSEPORT).
    assert_eq!(bound.len(), 2);
    assert!(bound.iter().all(|address| address.port() == port));
    assert_eq!(inherited.len(), 1, "iggy-5 is left for discard_rest");
    inherited.discard_rest(&store);
}
