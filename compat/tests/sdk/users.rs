//! Users, permissions, passwords and personal access tokens.

use crate::common::*;
use iggy::prelude::*;

fn read_streams_only() -> Permissions {
    Permissions {
        global: GlobalPermissions {
            read_streams: true,
            ..GlobalPermissions::default()
        },
        streams: None,
    }
}

/// Proves user CRUD end to end through the SDK: create with permissions, get
/// and list, rename and deactivate, change permissions, change one's own
/// password (old one refused with 42, new one accepted), delete (then not
/// found), and the root rules (cannot be deleted: 48, permissions fixed: 49).
#[tokio::test]
async fn users_crud_permissions_and_change_password() {
    let daemon = SdkDaemon::start();
    let root = daemon.root_client().await;

    let created = root
        .create_user(
            "alice",
            "secret1",
            UserStatus::Active,
            Some(read_streams_only()),
        )
        .await
        .expect("create user");
    assert_eq!(created.username, "alice");
    assert_eq!(created.permissions, Some(read_streams_only()));
    let alice_id = numeric(created.id);

    let fetched = root.get_user(&named("alice")).await.expect("get user");
    assert_eq!(fetched.expect("alice exists").id, created.id);
    let users = root.get_users().await.expect("get users");
    let names: Vec<&str> = users.iter().map(|user| user.username.as_str()).collect();
    assert!(
        names.contains(&"iggy") && names.contains(&"alice"),
        "{names:?}"
    );
    assert_code(
        root.create_user("alice", "whatever", UserStatus::Active, None)
            .await,
        46,
        "duplicate username",
    );

    // The user changes their own password; the old one stops working.
    let alice = daemon.client().await;
    alice
        .login_user("alice", "secret1")
        .await
        .expect("alice login");
    alice
        .change_password(&alice_id, "secret1", "secret2")
        .await
        .expect("change own password");
    assert_code(
        alice.change_password(&alice_id, "wrong", "secret3").await,
        42,
        "wrong current password",
    );
    let again = daemon.client().await;
    assert_code(
        again.login_user("alice", "secret1").await,
        42,
        "old password",
    );
    again
        .login_user("alice", "secret2")
        .await
        .expect("new password");

    // Permissions: grant manage_streams, then the user can create a stream.
    assert_code(
        again.create_stream("by-alice").await,
        41,
        "no manage_streams yet",
    );
    let mut more = read_streams_only();
    more.global.manage_streams = true;
    root.update_permissions(&alice_id, Some(more.clone()))
        .await
        .expect("update permissions");
    let details = root.get_user(&alice_id).await.unwrap().unwrap();
    assert_eq!(details.permissions, Some(more));
    again.create_stream("by-alice").await.expect("now allowed");

    // Rename and deactivate: the old name is gone, inactive users cannot log in.
    root.update_user(
        &alice_id,
        Some("alicia"),
        Some(UserStatus::Inactive),
        &UserUpdateOptions::default(),
    )
    .await
    .expect("update user");
    assert!(root.get_user(&named("alice")).await.unwrap().is_none());
    let renamed = root.get_user(&named("alicia")).await.unwrap().unwrap();
    assert_eq!(renamed.status, UserStatus::Inactive);
    let inactive = daemon.client().await;
    assert_code(
        inactive.login_user("alicia", "secret2").await,
        42,
        "inactive user logs in",
    );

    root.delete_user(&alice_id).await.expect("delete user");
    assert!(root.get_user(&alice_id).await.unwrap().is_none());
    assert_code(root.delete_user(&numeric(0)).await, 48, "delete root");
    assert_code(
        root.update_permissions(&numeric(0), None).await,
        49,
        "change root permissions",
    );
    daemon.assert_clean_log();
}

/// Proves personal access tokens: create (raw token returned once), list
/// (name and expiry), log in with the token on a fresh connection (as the
/// token's user), a duplicate name is 51, delete, and a deleted token no
/// longer logs in (53).
#[tokio::test]
async fn personal_access_tokens_create_list_login_delete() {
    let daemon = SdkDaemon::start();
    let root = daemon.root_client().await;
    root.create_user(
        "bob",
        "bobpass",
        UserStatus::Active,
        Some(read_streams_only()),
    )
    .await
    .expect("create user");
    let bob = daemon.client().await;
    bob.login_user("bob", "bobpass").await.expect("bob login");

    let token = bob
        .create_personal_access_token("ci-token", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .expect("create token")
        .token;
    assert!(!token.is_empty());
    assert_code(
        bob.create_personal_access_token("ci-token", PersonalAccessTokenExpiry::NeverExpire)
            .await,
        51,
        "duplicate token name",
    );
    let tokens = bob.get_personal_access_tokens().await.expect("list tokens");
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    assert_eq!(tokens[0].name, "ci-token");
    assert_eq!(tokens[0].expiry_at, None);
    assert!(
        root.get_personal_access_tokens().await.unwrap().is_empty(),
        "tokens are per user"
    );

    let with_token = daemon.client().await;
    let identity = with_token
        .login_with_personal_access_token(&token)
        .await
        .expect("login with token");
    let bob_id = root.get_user(&named("bob")).await.unwrap().unwrap().id;
    assert_eq!(identity.user_id, bob_id);
    assert_eq!(with_token.get_me().await.unwrap().user_id, Some(bob_id));
    with_token
        .get_streams()
        .await
        .expect("bob may read streams");

    bob.delete_personal_access_token("ci-token")
        .await
        .expect("delete token");
    assert!(bob.get_personal_access_tokens().await.unwrap().is_empty());
    assert_code(
        bob.delete_personal_access_token("ci-token").await,
        20,
        "delete a missing token",
    );
    let late = daemon.client().await;
    assert_code(
        late.login_with_personal_access_token(&token).await,
        53,
        "deleted token",
    );
    daemon.assert_clean_log();
}

/// Proves permission checks happen on the server and surface as the SDK's
/// `Unauthorized` (41): a user with no rights cannot read or change streams,
/// read stats or users, send or poll; a user with per-stream poll rights can
/// poll that stream but not send to it or touch another stream.
#[tokio::test]
async fn permission_denials_are_unauthorized() {
    let daemon = SdkDaemon::start();
    let root = daemon.root_client().await;
    stream_with_topic(&root, "open", "t", 1).await;
    stream_with_topic(&root, "closed", "t", 1).await;
    send_to(&root, "open", "t", 0, messages("m", 0, 3)).await;
    send_to(&root, "closed", "t", 0, messages("m", 0, 3)).await;
    let open_id = root.get_stream(&named("open")).await.unwrap().unwrap().id;

    root.create_user("nobody", "nopass", UserStatus::Active, None)
        .await
        .expect("create user without permissions");
    let nobody = daemon.client().await;
    nobody.login_user("nobody", "nopass").await.expect("login");
    nobody.ping().await.expect("ping needs no rights");
    assert_code(nobody.get_streams().await, 41, "get_streams");
    assert_code(nobody.create_stream("x").await, 41, "create_stream");
    assert_code(
        nobody.delete_stream(&named("open")).await,
        41,
        "delete_stream",
    );
    assert_code(nobody.get_stats().await, 41, "get_stats");
    assert_code(nobody.get_users().await, 41, "get_users");
    assert_code(nobody.get_clients().await, 41, "get_clients");
    let mut batch = messages("denied", 0, 1);
    assert_code(
        nobody
            .send_messages(
                &named("open"),
                &named("t"),
                &Partitioning::partition_id(0),
                &mut batch,
            )
            .await,
        41,
        "send_messages",
    );
    let consumer = Consumer::new(named("c"));
    assert_code(
        nobody
            .poll_messages(
                &named("open"),
                &named("t"),
                Some(0),
                &consumer,
                &PollingStrategy::first(),
                10,
                false,
            )
            .await,
        41,
        "poll_messages",
    );

    // Per-stream rights: poll on "open" only.
    let mut streams = std::collections::BTreeMap::new();
    streams.insert(
        open_id as usize,
        StreamPermissions {
            poll_messages: true,
            read_stream: true,
            ..StreamPermissions::default()
        },
    );
    root.create_user(
        "reader",
        "readpass",
        UserStatus::Active,
        Some(Permissions {
            global: GlobalPermissions::default(),
            streams: Some(streams),
        }),
    )
    .await
    .expect("create reader");
    let reader = daemon.client().await;
    reader
        .login_user("reader", "readpass")
        .await
        .expect("login");
    let polled = reader
        .poll_messages(
            &named("open"),
            &named("t"),
            Some(0),
            &consumer,
            &PollingStrategy::first(),
            10,
            false,
        )
        .await
        .expect("reader polls its stream");
    assert_eq!(polled.messages.len(), 3);
    let mut batch = messages("denied", 0, 1);
    assert_code(
        reader
            .send_messages(
                &named("open"),
                &named("t"),
                &Partitioning::partition_id(0),
                &mut batch,
            )
            .await,
        41,
        "reader sends",
    );
    assert_code(
        reader
            .poll_messages(
                &named("closed"),
                &named("t"),
                Some(0),
                &consumer,
                &PollingStrategy::first(),
                10,
                false,
            )
            .await,
        41,
        "reader polls another stream",
    );
    daemon.assert_clean_log();
}
