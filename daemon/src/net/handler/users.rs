//! Login, logout, users and personal access tokens. Login passwords are
//! checked (Argon2id) on the login pool (`net::login`), off the shards,
//! against the current view; changes go to shard 0 through
//! `prepare_and_apply`, so a new hash is computed here, not on the metadata
//! writer.

use super::{Handled, HandlerError, Outcome, Replier, Request_, now_us, prepare_and_apply};
use crate::net::admission::SecurityCounters;
use crate::net::context::NetContext;
use crate::net::login::Busy;
use crate::net::session::{Login, Session};
use iggyd_metadata::permissions::Principal;
use iggyd_metadata::{Applied, Ident, MetadataError, MetadataView};
use iggyd_wire::protocol::codes::{EvictionReason, Status};
use iggyd_wire::protocol::command::{Command, NotSend, Register};
use iggyd_wire::protocol::header::RequestHeader;
use iggyd_wire::protocol::limits::PROTOCOL_VERSION;
use iggyd_wire::protocol::options::OptionEntry;
use iggyd_wire::protocol::primitives::Identifier;
use iggyd_wire::protocol::reply::{
    LoginReply, PersonalAccessTokenInfo, UserInfo, encode_created_token, encode_login,
    encode_personal_access_tokens, encode_user, encode_user_details,
};
use std::num::NonZeroU64;
use std::rc::Rc;
use std::time::Instant;

/// Register (op 1): the protocol-version gate already ran in the decoder;
/// here the password (then, failing that, the token) is checked. A login
/// from an address with recent failures first waits its turn
/// (`net::admission`); the password check runs on the login pool, never on
/// this shard, and a full pool answers status 58 (TransientNotAccepted: the
/// SDK retries). Failures are evictions (§2.6): 9 bad credentials, 10 bad
/// token, 11 inactive; after `limits.login_failures_before_close` of them
/// the connection closes behind the eviction.
pub(crate) async fn login(
    context: &Rc<NetContext>,
    session: &mut Session,
    header: &RequestHeader,
    register: &Register<'_>,
    commit: u64,
) -> Outcome {
    let replier = Replier {
        header,
        session: 0,
        commit,
    };
    let peer = session.peer.ip();
    let admission = &context.net.admission;
    let turn = admission.login_turn(peer, Instant::now());
    if turn > context.net.limits.login_timeout {
        // The turn lies past any login deadline: the client would time out
        // waiting. Its address keeps failing; say nothing more to it.
        SecurityCounters::bump(&admission.counters.logins_refused);
        return Outcome::Close("login backoff longer than limits.login_timeout".to_string());
    }
    if !turn.is_zero() {
        // Waiting out the turn must not hold up a stop.
        let stop = context.stop_signal();
        let stopping = async {
            if !context.is_stopping() {
                let _ = stop.recv_async().await;
            }
        };
        monoio::select! {
            _ = monoio::time::sleep(turn) => {}
            _ = stopping => return Outcome::Close("stopping during a login backoff".to_string()),
        }
    }
    let mut verified = None;
    let mut via_token = None;
    if let Some(password) = &register.password {
        let checked =
            context
                .net
                .logins
                .try_check(context.view(), password.username, password.password);
        match checked {
            Ok(pending) => verified = pending.verdict().await,
            Err(Busy) => {
                SecurityCounters::bump(&admission.counters.logins_refused);
                if let Some(suppressed) = context.notice("login-queue-full") {
                    tracing::warn!(
                        shard = context.shard,
                        peer = %session.peer,
                        suppressed,
                        "a login was turned away: limits.max_queued_logins checks already wait \
                         (status 58, the client retries)"
                    );
                }
                return replier.status(Status::TransientNotAccepted);
            }
        }
    }
    if verified.is_none() {
        let view = context.view();
        let reason = match &register.token {
            Some(token) => match view.verify_token(token.token, now_us()) {
                Ok(user_id) => {
                    verified = Some(user_id);
                    via_token = Some(iggyd_metadata::auth::hash_token(token.token));
                    None
                }
                Err(MetadataError::UserInactive { .. }) => Some(EvictionReason::UserInactive),
                Err(_) if register.password.is_some() => Some(EvictionReason::InvalidCredentials),
                Err(_) => Some(EvictionReason::InvalidToken),
            },
            None => Some(EvictionReason::InvalidCredentials),
        };
        if let Some(reason) = reason {
            return login_failed(context, session, &replier, reason);
        }
    }
    // The view now (a password check waited on the login pool: the account
    // may have changed since).
    let grant = verified.and_then(|user_id| context.view().grant(user_id, via_token));
    let Some(grant) = grant else {
        return login_failed(
            context,
            session,
            &replier,
            EvictionReason::InvalidCredentials,
        );
    };
    let user_id = grant.user_id;
    admission.login_succeeded(peer);
    session.failed_logins = 0;
    // A second login on a logged-in connection keeps the session when it is
    // the same user (Apache re-sends it); another user starts afresh.
    let session_number = match session.login {
        Some(login) if login.grant == grant => login.session,
        Some(_) => {
            super::session_ended(context, session).await;
            context.new_session()
        }
        None => context.new_session(),
    };
    session.login = Some(Login {
        grant,
        session: session_number,
        client: header.client,
    });
    session.ended = Some(context.watch_grant(session.client_id, grant));
    context.update_client(session.client_id, Some(user_id), Vec::new());
    if let Some(activity) = context.client_activity(session.client_id) {
        activity.set_session(session_number);
    }
    let Some(session_id) = NonZeroU64::new(session_number) else {
        return replier.evict(EvictionReason::SessionError);
    };
    let mut out = Vec::new();
    encode_login(
        &mut out,
        &LoginReply {
            user_id,
            session: session_id,
            server_protocol_version: PROTOCOL_VERSION,
            server_version: env!("CARGO_PKG_VERSION"),
        },
    );
    tracing::debug!(client_id = session.client_id, user_id, "logged in");
    Replier {
        header,
        session: session_number,
        commit,
    }
    .ok(&out)
}

/// A failed login: counted, the address's backoff grows, and after
/// `limits.login_failures_before_close` failures the connection closes
/// behind the eviction.
fn login_failed(
    context: &NetContext,
    session: &mut Session,
    replier: &Replier<'_>,
    reason: EvictionReason,
) -> Outcome {
    context
        .net
        .admission
        .login_failed(session.peer.ip(), Instant::now());
    session.failed_logins = session.failed_logins.saturating_add(1);
    if session.failed_logins >= context.net.limits.login_failures_before_close {
        session.close_after_reply = true;
    }
    // One line per shard every few seconds at most; a warning (an event in
    // iggy-top) once failures repeat within that time, as in a flood.
    match context.notice("login-failed") {
        Some(0) => tracing::info!(
            shard = context.shard,
            peer = %session.peer,
            failures_on_connection = session.failed_logins,
            "a login failed"
        ),
        Some(suppressed) => tracing::warn!(
            shard = context.shard,
            peer = %session.peer,
            suppressed,
            failures_on_connection = session.failed_logins,
            "logins keep failing (more since the last line: suppressed)"
        ),
        None => {}
    }
    replier.evict(reason)
}

fn user_info(user: &iggyd_metadata::User) -> UserInfo<'_> {
    UserInfo {
        id: user.id,
        created_at_us: user.created_at_us,
        status: user.status.to_wire(),
        username: &user.username,
        options: &[] as &[OptionEntry<'_>],
    }
}

fn encode_details(view: &MetadataView, user_id: u32) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(user) = view.user_by_id(user_id) {
        encode_user_details(&mut out, &user_info(user), user.permissions.as_ref());
    }
    out
}

pub(crate) fn get_user(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    user: Identifier<'_>,
) -> Handled<Outcome> {
    let Ok(found) = request.view.user(&Ident::from(&user)) else {
        // Not found reads are an empty body (§8 item 9).
        return Ok(request.replier.empty());
    };
    principal.get_user(found.id)?;
    Ok(request.replier.ok(&encode_details(&request.view, found.id)))
}

pub(crate) fn get_users(request: &mut Request_<'_>, principal: &Principal<'_>) -> Handled<Outcome> {
    principal.get_users()?;
    let mut out = Vec::new();
    for user in request.view.users() {
        encode_user(&mut out, &user_info(user));
    }
    Ok(request.replier.ok(&out))
}

/// Create, update, delete, permissions, password.
pub(crate) async fn change_user(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    match &command {
        Command::ChangePassword { user, .. } => {
            let target = request.view.user(&Ident::from(user))?;
            principal.change_password(target.id)?;
        }
        _ => principal.manage_users()?,
    }
    let (applied, view, _) = prepare_and_apply(request, &command).await?;
    match applied {
        Applied::UserCreated { user_id } => Ok(request.replier.ok(&encode_details(&view, user_id))),
        _ => Ok(request.replier.empty()),
    }
}

pub(crate) fn get_tokens(request: &mut Request_<'_>) -> Handled<Outcome> {
    let user_id = request
        .session
        .user_id()
        .ok_or(HandlerError::Status(Status::Unauthenticated))?;
    let mut out = Vec::new();
    if let Some(user) = request.view.user_by_id(user_id) {
        let tokens: Vec<PersonalAccessTokenInfo<'_>> = user
            .tokens
            .values()
            .map(|token| PersonalAccessTokenInfo {
                name: &token.name,
                expiry_at_us: token.expiry_at_us,
            })
            .collect();
        encode_personal_access_tokens(&mut out, &tokens);
    }
    Ok(request.replier.ok(&out))
}

/// Tokens are always the caller's own: a login is the only permission.
pub(crate) async fn change_token(
    request: &mut Request_<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    let (_, _, token) = prepare_and_apply(request, &command).await?;
    match token {
        Some(raw) => {
            let mut out = Vec::new();
            encode_created_token(&mut out, &raw);
            Ok(request.replier.ok(&out))
        }
        None => Ok(request.replier.empty()),
    }
}
