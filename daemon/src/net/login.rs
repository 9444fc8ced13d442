//! The login pool: password checks (Argon2id, tens of milliseconds of a
//! core each) run on a few threads of their own, `login-N`, never on a
//! shard. A shard hands a check over with `try_check` and awaits the verdict
//! on a channel, so its loop (and its pump) keeps running meanwhile; when
//! `limits.max_queued_logins` checks already wait, the login is refused at
//! once instead of queued.
//!
//! Every check costs the same whether the user exists, is inactive or not:
//! an unknown or inactive user is verified against a dummy hash made at
//! start with the production cost, so the time of a failed login does not
//! tell which usernames exist. The threads run at a lower priority (nice),
//! so on a machine whose every core runs a shard, hashing yields to them.
//!
//! Must not: touch shard state, log or keep a password, or outlive its
//! senders (a thread ends when every sender is gone).

use crate::limits;
use iggyd_metadata::MetadataView;
use iggyd_metadata::auth::{self, HashCost};
use iggyd_metadata::model::UserStatus;
use std::sync::Arc;

/// One password check.
struct Check {
    view: Arc<MetadataView>,
    username: String,
    password: String,
    verdict: flume::Sender<Option<u32>>,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Handle to the pool; cloned into every shard.
#[derive(Debug, Clone)]
pub struct LoginPool {
    checks: flume::Sender<Check>,
}

/// The login queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

/// A check handed to the pool; await `verdict`.
#[derive(Debug)]
pub struct Pending {
    verdict: flume::Receiver<Option<u32>>,
}

impl Pending {
    /// The user id when the password is right for an active user; `None`
    /// for every kind of failure (and if the pool is gone).
    pub async fn verdict(self) -> Option<u32> {
        self.verdict.recv_async().await.ok().flatten()
    }
}

impl LoginPool {
    /// Start `threads` threads with room for `queue` waiting checks. The
    /// dummy hash is made here, once, with `cost` (production cost in the
    /// daemon, so a check against it costs what a real one does).
    pub fn start(threads: usize, queue: usize, cost: HashCost) -> std::io::Result<LoginPool> {
        assert!(threads > 0);
        assert!(queue > 0);
        let mut secret = [0u8; 24];
        auth::random_bytes(&mut secret).map_err(std::io::Error::other)?;
        let dummy =
            auth::hash_password(&auth::base64_url(&secret), cost).map_err(std::io::Error::other)?;
        let dummy: Arc<str> = dummy.into();
        let (checks, receiver) = flume::bounded::<Check>(queue);
        for index in 0..threads {
            let receiver = receiver.clone();
            let dummy = dummy.clone();
            std::thread::Builder::new()
                .name(format!("login-{index}"))
                .spawn(move || {
                    lower_priority();
                    while let Ok(check) = receiver.recv() {
                        let verdict = verify(&check.view, &check.username, &check.password, &dummy);
                        // The connection may have gone; nothing to do then.
                        let _ = check.verdict.send(verdict);
                    }
                })?;
        }
        Ok(LoginPool { checks })
    }

    /// Queue a check of `password` for `username` against `view`, or
    /// `Busy` when `limits.max_queued_logins` checks already wait.
    pub fn try_check(
        &self,
        view: Arc<MetadataView>,
        username: &str,
        password: &str,
    ) -> Result<Pending, Busy> {
        let (verdict, receiver) = flume::bounded(1);
        let check = Check {
            view,
            username: username.to_string(),
            password: password.to_string(),
            verdict,
        };
        match self.checks.try_send(check) {
            Ok(()) => Ok(Pending { verdict: receiver }),
            Err(_) => Err(Busy),
        }
    }

    /// Checks waiting for a thread.
    pub fn queued(&self) -> usize {
        self.checks.len()
    }
}

/// Runs one check: exactly one Argon2id verification whatever the input
/// (lengths the wire cannot log in with aside, which reveal nothing the
/// client did not send).
fn verify(view: &MetadataView, username: &str, password: &str, dummy: &str) -> Option<u32> {
    let username_len = username.chars().count();
    let password_len = password.chars().count();
    if !(limits::metadata::USERNAME_LEN_MIN..=limits::metadata::USERNAME_LEN_MAX)
        .contains(&username_len)
        || !(limits::metadata::PASSWORD_LEN_MIN..=limits::metadata::PASSWORD_LEN_MAX)
            .contains(&password_len)
    {
        return None;
    }
    let user = view.user_by_name(username);
    let phc = user.map_or(dummy, |user| user.password_hash.as_str());
    let matches = auth::password_matches(password, phc);
    let user = user?;
    (matches && user.status == UserStatus::Active).then_some(user.id)
}

/// Nice the calling thread (Linux: per thread) to `LOGIN_THREAD_NICE`; a
/// refusal is harmless, the thread just competes as an equal.
fn lower_priority() {
    // SAFETY: setpriority on the calling thread's id has no memory effects.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            limits::LOGIN_THREAD_NICE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggyd_metadata::{Metadata, MetadataCommand};

    fn view_with(users: &[(&str, &str, bool)]) -> Arc<MetadataView> {
        let mut metadata = Metadata::new();
        for (name, password, active) in users {
            metadata
                .apply(MetadataCommand::CreateUser {
                    username: (*name).to_string(),
                    password_hash: auth::hash_password(password, HashCost::cheap()).unwrap(),
                    status: if *active {
                        UserStatus::Active
                    } else {
                        UserStatus::Inactive
                    },
                    permissions: None,
                    created_at_us: 1,
                })
                .unwrap();
        }
        metadata.publish()
    }

    // Proves the verdicts: the right password of an active user gives its
    // id; a wrong password, an unknown user, an inactive user and lengths
    // the wire cannot log in with give nothing.
    #[test]
    fn verdicts() {
        let view = view_with(&[("alice", "secret", true), ("bob", "secret", false)]);
        let dummy = auth::hash_password("dummy-password", HashCost::cheap()).unwrap();
        let alice = view.user_by_name("alice").unwrap().id;
        assert_eq!(verify(&view, "alice", "secret", &dummy), Some(alice));
        assert_eq!(verify(&view, "alice", "Secret", &dummy), None);
        assert_eq!(verify(&view, "bob", "secret", &dummy), None);
        assert_eq!(verify(&view, "carol", "secret", &dummy), None);
        assert_eq!(verify(&view, "al", "secret", &dummy), None);
        assert_eq!(verify(&view, "alice", "se", &dummy), None);
    }

    // Proves a check runs off the caller's thread and answers on the
    // channel, and a full queue refuses at once instead of waiting: with
    // the one thread held on a check of an expensive hash and a queue of
    // one, the third check is `Busy`.
    #[test]
    fn checks_answer_on_a_channel_and_a_full_queue_refuses() {
        let pool = LoginPool::start(1, 1, HashCost::cheap()).unwrap();
        let view = view_with(&[("alice", "secret", true)]);
        let alice = view.user_by_name("alice").unwrap().id;
        let pending = pool.try_check(view.clone(), "alice", "secret").unwrap();
        let verdict = pending.verdict.recv().unwrap();
        assert_eq!(verdict, Some(alice));

        // Hold the thread: a user whose hash costs far more than a try_send.
        let mut metadata = Metadata::new();
        let slow = HashCost {
            memory_kib: 8 * 1024,
            iterations: 2,
            parallelism: 1,
        };
        metadata
            .apply(MetadataCommand::CreateUser {
                username: "slow".into(),
                password_hash: auth::hash_password("secret", slow).unwrap(),
                status: UserStatus::Active,
                permissions: None,
                created_at_us: 1,
            })
            .unwrap();
        let slow_view = metadata.publish();
        let mut held = Vec::new();
        let mut busy = 0;
        for _ in 0..3 {
            match pool.try_check(slow_view.clone(), "slow", "secret") {
                Ok(pending) => held.push(pending),
                Err(Busy) => busy += 1,
            }
        }
        assert!(busy >= 1, "a full queue must refuse");
        for pending in held {
            assert!(pending.verdict.recv().unwrap().is_some());
        }
    }
}
