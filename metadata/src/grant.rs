//! What a login was granted and whether it still stands: a session holds a
//! [`Grant`] (user id, the account's incarnation, and the token it logged in
//! with, if any) and every shard checks it against each view it installs
//! and before each request ([`Metadata::standing`]).
//!
//! Must not: look at passwords (a password change keeps sessions, as in
//! Apache), read clocks, or mutate anything. User ids are reused (§8 item
//! 2); incarnations never are, so a session of a deleted account can never
//! pass as the next account created with the same id.

use super::model::{Metadata, TokenHash, User, UserStatus};

/// The identity a session logged in to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub user_id: u32,
    /// `User::incarnation` at login.
    pub incarnation: u64,
    /// The personal access token used to log in (its hash), or `None` for
    /// a password login.
    pub token: Option<TokenHash>,
}

/// Why a grant no longer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The account was deleted (its id may belong to a new account now).
    UserDeleted,
    /// The account was set inactive.
    UserInactive,
    /// The incarnation changed: every permission was withdrawn, the
    /// account was deactivated and reactivated since the login, or the id
    /// now names an account created after this one was deleted.
    Withdrawn,
    /// The personal access token the session logged in with was deleted.
    TokenDeleted,
}

impl Metadata {
    /// The grant of a login that `user_id` just passed, with `token` when
    /// it logged in with a personal access token.
    pub fn grant(&self, user_id: u32, token: Option<TokenHash>) -> Option<Grant> {
        let user = self.user_by_id(user_id)?;
        Some(Grant {
            user_id,
            incarnation: user.incarnation,
            token,
        })
    }

    /// The session's user when its grant still stands.
    pub fn standing(&self, grant: &Grant) -> Result<&User, Revoked> {
        let user = self.user_by_id(grant.user_id).ok_or(Revoked::UserDeleted)?;
        if user.incarnation != grant.incarnation {
            // The id now names another account, or this one lost its
            // rights after the login.
            return Err(if user.status == UserStatus::Inactive {
                Revoked::UserInactive
            } else {
                Revoked::Withdrawn
            });
        }
        if user.status != UserStatus::Active {
            return Err(Revoked::UserInactive);
        }
        if let Some(hash) = &grant.token
            && !user.tokens.values().any(|token| &token.token_hash == hash)
        {
            return Err(Revoked::TokenDeleted);
        }
        Ok(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ident, MetadataCommand as C, UserStatus};

    fn create(metadata: &mut Metadata, name: &str) -> u32 {
        match metadata
            .apply(C::CreateUser {
                username: name.into(),
                password_hash: String::new(),
                status: UserStatus::Active,
                permissions: None,
                created_at_us: 1,
            })
            .unwrap()
        {
            crate::Applied::UserCreated { user_id } => user_id,
            other => panic!("{other:?}"),
        }
    }

    // Proves a grant survives unrelated changes, and ends for good on
    // delete (even when the id is reused), on deactivation (even after
    // reactivation), and when the login's token is deleted.
    #[test]
    fn grants_end_with_the_account_rights() {
        let mut metadata = Metadata::new();
        assert_eq!(create(&mut metadata, "root"), 0);
        let alice = create(&mut metadata, "alice");
        let grant = metadata.grant(alice, None).unwrap();
        metadata
            .apply(C::ChangePassword {
                user: Ident::Id(alice),
                password_hash: "x".into(),
            })
            .unwrap();
        assert!(metadata.standing(&grant).is_ok());
        metadata
            .apply(C::DeleteUser {
                user: Ident::Id(alice),
            })
            .unwrap();
        assert_eq!(metadata.standing(&grant), Err(Revoked::UserDeleted));
        let bob = create(&mut metadata, "bob");
        assert_eq!(bob, alice);
        assert_eq!(metadata.standing(&grant), Err(Revoked::Withdrawn));

        let grant = metadata.grant(bob, None).unwrap();
        let deactivate = |status| C::UpdateUser {
            user: Ident::Id(bob),
            username: None,
            status: Some(status),
        };
        metadata.apply(deactivate(UserStatus::Inactive)).unwrap();
        assert_eq!(metadata.standing(&grant), Err(Revoked::UserInactive));
        metadata.apply(deactivate(UserStatus::Active)).unwrap();
        assert_eq!(metadata.standing(&grant), Err(Revoked::Withdrawn));

        let hash = [7u8; 32];
        metadata
            .apply(C::CreatePat {
                user_id: bob,
                name: "deploy".into(),
                token_hash: hash,
                expiry_at_us: None,
                created_at_us: 1,
            })
            .unwrap();
        let by_token = metadata.grant(bob, Some(hash)).unwrap();
        let by_password = metadata.grant(bob, None).unwrap();
        metadata
            .apply(C::DeletePat {
                user_id: bob,
                name: "deploy".into(),
            })
            .unwrap();
        assert_eq!(metadata.standing(&by_token), Err(Revoked::TokenDeleted));
        assert!(metadata.standing(&by_password).is_ok());
    }
}
