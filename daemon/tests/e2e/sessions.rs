//! Account lifecycle against open sessions (issue 11 items 1 and 2): an
//! administrator deletes a user, sets it inactive, withdraws its
//! permissions or deletes the token a session logged in with, and the
//! affected sessions end on every shard — the client reads an eviction and
//! the connection closes — while ids stay what the SDKs expect (a deleted
//! user's id is reused by the next user created).

use std::io::Read;
use std::time::Duration;

use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, ClientError, Identifier, Request, Version, read_frame};

use crate::messages::logged_in;

/// Eviction reasons (§2.6).
const REASON_USER_INACTIVE: u8 = 11;
const REASON_SESSION_ERROR: u8 = 12;
/// Header command byte of an eviction.
const COMMAND_EVICTION: u8 = 13;

/// A permissions block: 10 global flags, then `has_streams = 0`; flag 4 is
/// `manage_streams`, flag 5 `read_streams` (always granted here).
fn global_permissions(manage_streams: bool) -> Vec<u8> {
    let mut block = vec![0u8; 11];
    block[4] = u8::from(manage_streams);
    block[5] = 1;
    block
}

fn create_user(root: &mut Client, name: &str, permissions: Option<&[u8]>) -> u32 {
    let body = root
        .call(&Request::create_user(name, "secret", 1, permissions, &[]))
        .unwrap_or_else(|error| panic!("create user {name}: {error}"));
    u32::from_le_bytes(body[..4].try_into().unwrap())
}

/// Waits (bounded by the client's read timeout) for the server to end an
/// idle session: one eviction frame with `reason`, then end of stream.
fn expect_evicted_while_idle(client: &mut Client, reason: u8) {
    let stream = client.socket_mut();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let frame = read_frame(stream)
        .expect("read the eviction")
        .expect("an eviction frame before the close");
    assert_eq!(frame.command(), COMMAND_EVICTION);
    assert_eq!(frame.eviction_reason(), reason);
    let mut rest = [0u8; 1];
    assert_eq!(stream.read(&mut rest).expect("read to the close"), 0);
}

// Proves a deleted user's open session does not become the next user
// created with the same id: alice (no permissions) is logged in while root
// deletes her and creates bob with `manage_streams`; bob gets alice's id
// (Apache's id rule), yet alice's connection cannot create a stream: her
// next request is answered with an eviction and the connection closes.
#[test]
fn deleted_users_session_does_not_inherit_the_next_user() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    let alice_id = create_user(&mut root, "alice", None);
    let mut alice = logged_in(daemon.address, "alice", "secret");
    root.call(&Request::delete_user(Identifier::Name("alice")))
        .unwrap();
    let bob_id = create_user(&mut root, "bob", Some(&global_permissions(true)));
    assert_eq!(bob_id, alice_id, "user ids are reused, as in Apache");
    let mut bob = logged_in(daemon.address, "bob", "secret");
    bob.create_stream("bobs").unwrap();

    match alice.create_stream("alices") {
        Err(ClientError::Evicted { reason }) => assert_eq!(reason, REASON_SESSION_ERROR),
        // The prompt close may reach alice before her request does.
        Err(ClientError::Closed | ClientError::Io(_)) => {}
        other => panic!("alice's stale session was served: {other:?}"),
    }
    let streams = root.call(&Request::get_streams()).unwrap().to_vec();
    assert!(
        !streams.windows(6).any(|name| name == b"alices"),
        "a deleted user's session created a stream"
    );
    daemon.assert_clean_log();
}

// Proves setting a user inactive ends its idle sessions at once: alice's
// connection, sending nothing, reads an eviction (UserInactive) and the
// close; a new login is refused.
#[test]
fn inactive_user_loses_open_sessions() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    create_user(&mut root, "alice", Some(&global_permissions(true)));
    let mut sessions: Vec<Client> = (0..4)
        .map(|_| logged_in(daemon.address, "alice", "secret"))
        .collect();
    sessions[0].create_stream("before").unwrap();
    root.call(&Request::update_user(
        Identifier::Name("alice"),
        None,
        Some(2),
        &[],
    ))
    .unwrap();
    for session in &mut sessions {
        expect_evicted_while_idle(session, REASON_USER_INACTIVE);
    }
    let mut again = Client::connect(daemon.address).unwrap();
    assert!(matches!(
        again.login("alice", "secret"),
        Err(ClientError::Evicted { .. })
    ));
    daemon.assert_clean_log();
}

// Proves withdrawing every permission ends the user's sessions, and that
// re-activating does not revive a session ended by deactivation.
#[test]
fn withdrawn_permissions_end_sessions() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    create_user(&mut root, "alice", Some(&global_permissions(true)));
    let mut alice = logged_in(daemon.address, "alice", "secret");
    alice.create_stream("mine").unwrap();
    root.call(&Request::update_permissions(
        Identifier::Name("alice"),
        None,
    ))
    .unwrap();
    expect_evicted_while_idle(&mut alice, REASON_SESSION_ERROR);
    // Changing rights to other rights keeps sessions.
    root.call(&Request::update_permissions(
        Identifier::Name("alice"),
        Some(&global_permissions(true)),
    ))
    .unwrap();
    let mut alice = logged_in(daemon.address, "alice", "secret");
    root.call(&Request::update_permissions(
        Identifier::Name("alice"),
        Some(&global_permissions(false)),
    ))
    .unwrap();
    alice.ping().unwrap();
    alice.call(&Request::get_streams()).unwrap();
    daemon.assert_clean_log();
}

// Proves deleting a personal access token ends the sessions that logged in
// with it, and only those: the password session that deleted it goes on.
#[test]
fn deleted_token_ends_its_sessions() {
    let daemon = TestDaemon::start();
    let mut root = logged_in(daemon.address, "iggy", "iggy");
    create_user(&mut root, "alice", Some(&global_permissions(true)));
    let mut alice = logged_in(daemon.address, "alice", "secret");
    let body = alice
        .call(&Request::create_personal_access_token("deploy", 0))
        .unwrap()
        .to_vec();
    let token = std::str::from_utf8(&body[1..]).unwrap().to_string();
    let mut by_token = Client::connect(daemon.address).unwrap();
    by_token
        .call(&Request::login_token(Version::TESTKIT, &token, &[]))
        .unwrap();
    by_token.ping().unwrap();
    alice
        .call(&Request::delete_personal_access_token("deploy"))
        .unwrap();
    expect_evicted_while_idle(&mut by_token, REASON_SESSION_ERROR);
    alice.create_stream("still-mine").unwrap();
    daemon.assert_clean_log();
}
