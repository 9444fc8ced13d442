//! Executes one decoded request for one connection and builds its reply.
//!
//! Reads come from the shard's current metadata view; metadata changes are
//! prepared here (clock, password hashes, tokens) and sent to shard 0, the
//! only metadata writer; partition work goes to the owner shard's pump over
//! the mesh. This module never touches partition state itself and never
//! mutates metadata except through shard 0. Every request gets exactly one
//! reply: a status, a payload, or an eviction (§2.8).
//!
//! Errors travel as reply `status` with an empty body (the single channel
//! the protocol reference recommends); only login failures and replicated
//! requests without a session are evictions.

mod groups;
mod messages;

use iggyd_wire::protocol::frame::decode_frame;
use iggyd_wire::protocol::reply::encode_error;
mod streams;
mod system;
mod users;

use super::session::Session;
use crate::net::context::NetContext;
use crate::net::reply_budget::ReplyHold;
use crate::net::reply_frame::ReplyFrame;
use crate::shard::front::Front;
use crate::shard::mesh::{Request, Response, ShardId, ShardMessage};
use crate::shard::op::{PartitionOp, PumpError, Reply};
use iggyd_metadata::grant::Revoked;
use iggyd_metadata::model::User;
use iggyd_metadata::permissions::Principal;
use iggyd_metadata::prepare::{PrepareContext, PrepareError, Prepared, prepare};
use iggyd_metadata::{
    Applied, Ident, MemberKey, MetadataCommand, MetadataError, MetadataView, Stream, Topic,
};
use iggyd_storage::SharedSlice;
use iggyd_wire::protocol::codes::{EvictionReason, Operation, Status};
use iggyd_wire::protocol::command::{Command, NotSend, Split};
use iggyd_wire::protocol::header::RequestHeader;
use iggyd_wire::protocol::primitives::Identifier;
use iggyd_wire::protocol::reply::{
    encode_eviction, encode_reply, encode_reply_in_place, encode_status_reply,
};
use std::rc::Rc;
use std::sync::Arc;

/// What the connection does with a handled request.
#[derive(Debug)]
pub enum Outcome {
    /// Write these bytes (a reply or an eviction frame) and go on.
    Reply(ReplyFrame),
    /// Close without a reply: the byte stream cannot be trusted.
    Close(String),
    /// Write this eviction frame, then close: the session was revoked.
    Evict(Vec<u8>),
}

/// Builds the one reply of a request.
pub(crate) struct Replier<'a> {
    header: &'a RequestHeader,
    session: u64,
    commit: u64,
}

impl Replier<'_> {
    pub(crate) fn ok(&self, payload: &[u8]) -> Outcome {
        match encode_reply(self.header, Status::Ok, payload, self.session, self.commit) {
            Ok(reply) => Outcome::Reply(reply.into()),
            // Only a reply over 64 MiB fails to encode; say so instead.
            Err(error) => {
                tracing::warn!(%error, "reply too large");
                self.status(Status::Error)
            }
        }
    }

    /// A successful reply whose body follows `HEADER_SIZE` free bytes at
    /// the front of `frame` and ends with `tail` (built in place, without
    /// copying the body); the frame keeps `hold` until it is sent.
    pub(crate) fn ok_in_place(
        &self,
        frame: Vec<u8>,
        tail: Option<SharedSlice>,
        hold: Option<ReplyHold>,
    ) -> Outcome {
        let header_size = iggyd_wire::protocol::limits::HEADER_SIZE;
        if frame.len() < header_size {
            return self.status(Status::Error);
        }
        let tail_len = tail.as_ref().map_or(0, SharedSlice::len);
        match encode_reply_in_place(self.header, frame, tail_len, self.session, self.commit) {
            Some(head) => Outcome::Reply(ReplyFrame::new(head, tail).holding(hold)),
            None => {
                // Not expected for the operations that build in place; the
                // body is copied behind a fresh header instead.
                self.status(Status::Error)
            }
        }
    }

    pub(crate) fn empty(&self) -> Outcome {
        self.ok(&[])
    }

    pub(crate) fn status(&self, status: Status) -> Outcome {
        Outcome::Reply(encode_status_reply(self.header, status, self.session, self.commit).into())
    }

    pub(crate) fn evict(&self, reason: EvictionReason) -> Outcome {
        Outcome::Reply(encode_eviction(self.header, reason).to_vec().into())
    }

    pub(crate) fn error(&self, error: &HandlerError) -> Outcome {
        self.status(error.status())
    }

    /// `error`'s answer, counting a cluster's 58 and 57 on the shard's
    /// connections (`NetContext::count_transient`).
    pub(crate) fn refuse(&self, context: &NetContext, error: &HandlerError) -> Outcome {
        context.count_transient(error.status());
        self.error(error)
    }
}

/// Why a request failed, reduced to what the client is told.
#[derive(Debug)]
pub(crate) enum HandlerError {
    Metadata(MetadataError),
    Pump(PumpError),
    Status(Status),
}

impl HandlerError {
    pub(crate) fn status(&self) -> Status {
        match self {
            HandlerError::Metadata(error) => error.status(),
            HandlerError::Pump(error) => error.status(),
            HandlerError::Status(status) => *status,
        }
    }
}

impl From<MetadataError> for HandlerError {
    fn from(error: MetadataError) -> Self {
        HandlerError::Metadata(error)
    }
}

impl From<PumpError> for HandlerError {
    fn from(error: PumpError) -> Self {
        HandlerError::Pump(error)
    }
}

impl From<PrepareError> for HandlerError {
    fn from(error: PrepareError) -> Self {
        match error {
            PrepareError::Rejected(error) => HandlerError::Metadata(error),
            PrepareError::Credential(error) => {
                tracing::error!(%error, "credential preparation failed");
                HandlerError::Status(Status::Error)
            }
        }
    }
}

pub(crate) type Handled<T> = Result<T, HandlerError>;

/// Everything a command handler needs about the request.
pub(crate) struct Request_<'a> {
    pub context: &'a Rc<NetContext>,
    pub session: &'a mut Session,
    pub view: Arc<MetadataView>,
    pub replier: Replier<'a>,
}

/// The logged-in user of `session` in `view`, or `None` when the login no
/// longer stands (account deleted, deactivated, rights withdrawn, token
/// deleted).
fn principal_user<'v>(view: &'v MetadataView, session: &Session) -> Option<&'v User> {
    session
        .login
        .and_then(|login| view.standing(&login.grant).ok())
}

/// The eviction a revoked session gets: the SDK reads both as
/// `Unauthenticated` and reconnects, where its re-login meets the
/// account's current state.
pub(crate) fn eviction_of(revoked: Revoked) -> EvictionReason {
    match revoked {
        Revoked::UserInactive => EvictionReason::UserInactive,
        Revoked::UserDeleted | Revoked::Withdrawn | Revoked::TokenDeleted => {
            EvictionReason::SessionError
        }
    }
}

/// Why a request cannot run as a logged-in user.
enum Unauthorized {
    /// Never logged in (or logged out): the protocol's answer to a request
    /// without a session.
    NoSession(Outcome),
    /// The login was revoked by a metadata change.
    Revoked(Revoked),
}

/// The current view when the session is logged in and its login still
/// stands in it; else the outcome that answers the request.
fn authorized_view(
    context: &NetContext,
    session: &Session,
    header: &RequestHeader,
    replier: &Replier<'_>,
) -> Result<Arc<MetadataView>, Outcome> {
    authenticated_view(context, session, header, replier).map_err(|error| match error {
        Unauthorized::NoSession(outcome) => outcome,
        Unauthorized::Revoked(revoked) => end_revoked(session, header, revoked),
    })
}

fn authenticated_view(
    context: &NetContext,
    session: &Session,
    header: &RequestHeader,
    replier: &Replier<'_>,
) -> Result<Arc<MetadataView>, Unauthorized> {
    let view = context.view();
    let Some(login) = session.login else {
        return Err(Unauthorized::NoSession(
            if header.operation == Operation::NonReplicated as u8 {
                replier.status(Status::Unauthenticated)
            } else {
                replier.evict(EvictionReason::NoSession)
            },
        ));
    };
    match view.standing(&login.grant) {
        Ok(_) => Ok(view),
        Err(revoked) => Err(Unauthorized::Revoked(revoked)),
    }
}

/// Decode and handle one whole frame (header and body, as read from the
/// socket); the caller writes the outcome. A send hands the frame's buffer
/// on to the partition's owner, so its batch is never copied on the way.
pub async fn handle_frame(
    context: &Rc<NetContext>,
    session: &mut Session,
    frame: Vec<u8>,
) -> Outcome {
    let decoded = match decode_frame(&frame) {
        Ok(Some((decoded, _))) => decoded,
        Ok(None) => return Outcome::Close("incomplete frame".to_string()),
        Err(error) => return Outcome::Close(error.to_string()),
    };
    let header = decoded.header;
    let command = decoded.command();
    if let Ok(command) = &command
        && let Some(outcome) = elsewhere(context, session, &header, command)
    {
        return outcome;
    }
    match command.map(Command::split) {
        Ok(Split::Send(send)) => {
            let outcome = match messages::plan_send(context, session, &header, &send, &frame) {
                Ok(plan) => messages::send_planned(context, session, &header, plan, frame).await,
                Err(outcome) => outcome,
            };
            session.settled_at = Some(std::time::Instant::now());
            outcome
        }
        Ok(Split::NotSend(command)) => {
            let reads_reports = matches!(
                command,
                Command::GetStream { .. }
                    | Command::GetStreams
                    | Command::GetTopic { .. }
                    | Command::GetTopics { .. }
            );
            let outcome = handle(context, session, &header, command).await;
            if !reads_reports {
                session.settled_at = Some(std::time::Instant::now());
            }
            outcome
        }
        Err(error) => {
            let commit = session.next_commit();
            match encode_error(&header, &error, session.number(), commit) {
                Some(reply) => Outcome::Reply(reply.into()),
                None => Outcome::Close(error.to_string()),
            }
        }
    }
}

/// A cluster node that does not lead the metadata group sends its clients
/// to the one that does: every request but a ping, a login, a logout, the
/// roster, who-am-I and a send it can route is answered 58 (not accepted:
/// nothing was done), on which the SDK asks for the roster and moves to the
/// leader; while no node leads, 57 (not committed, and nothing was done, so
/// the SDK's same-connection replay is safe) until one does.
///
/// A send is served by any node that hears the metadata group's leader and
/// whose metadata knows its partition: the partition's group forwards it
/// to the group's leader, node to node (a leader cut off refuses a new
/// batch there, 58, and keeps a resend of a batch in doubt waiting to be
/// resolved rather than stored twice; a node that hears no majority
/// answers 58 to everything, so a client moves on). So a
/// producer that lands on a follower after its leader died is served as
/// soon as the partition's group has a leader, not after the SDK's replays
/// of 58 (two seconds each, `TRANSIENT_FAILOVER_CHECK_INTERVAL` in the
/// SDK's `tcp_client.rs`) and its move to the metadata leader.
fn elsewhere(
    context: &NetContext,
    session: &mut Session,
    header: &RequestHeader,
    command: &Command<'_>,
) -> Option<Outcome> {
    let cluster = context.net.cluster.as_ref()?;
    // A node cut off lets sends through to the partition's group: a resend
    // of a batch in doubt waits there to be resolved rather than be sent
    // elsewhere and stored twice; a new batch is refused there (58).
    let send = matches!(command, Command::SendMessages(_));
    if cluster.leads()
        || (send && cluster.cut_off())
        || (cluster.live_leader().is_some()
            && matches!(command, Command::SendMessages(send) if messages::routable_here(context, send)))
        || matches!(
            command,
            Command::Ping
                | Command::Register(_)
                | Command::Logout
                | Command::GetClusterMetadata
                | Command::GetMe
        )
    {
        return None;
    }
    // 58: another node leads, or this one led but its quorum no longer
    // answers it (cut off: the others elect another); the SDK looks for
    // the leader. 57: an election is on; the SDK asks here again.
    // A node that hears no majority of the cluster is cut off itself: 58
    // too, so that a client does not replay into it for its whole budget.
    let status = if cluster.live_leader().is_some() || cluster.cut_off() || !cluster.in_majority() {
        Status::TransientNotAccepted
    } else {
        Status::TransientNotCommitted
    };
    let replier = Replier {
        header,
        session: session.number(),
        commit: session.next_commit(),
    };
    context.count_transient(status);
    Some(replier.status(status))
}

/// Handle one request other than a send; the caller writes the outcome.
async fn handle(
    context: &Rc<NetContext>,
    session: &mut Session,
    header: &RequestHeader,
    command: NotSend<'_>,
) -> Outcome {
    let commit = session.next_commit();
    let replier = Replier {
        header,
        session: session.number(),
        commit,
    };
    // A member's every request lets go of the partitions it has to hand
    // off once it committed what it polled (cooperative rebalancing).
    if session.login.is_some() {
        groups::release_handoffs(context, session).await;
    }
    match command {
        Command::Ping => return replier.empty(),
        Command::Register(register) => {
            let previous = session.number();
            let outcome = users::login(context, session, header, &register, commit).await;
            if session.number() != previous {
                context.net.session_gone(previous);
                if let Some(user_id) = session.user_id() {
                    context.net.session_started(session.number(), user_id);
                }
            }
            return outcome;
        }
        Command::Logout => {
            context.net.session_gone(session.number());
            session_ended(context, session).await;
            let replier = Replier {
                header,
                session: 0,
                commit,
            };
            return replier.empty();
        }
        _ => {}
    }
    let view = match authorized_view(context, session, header, &replier) {
        Ok(view) => view,
        Err(outcome) => return outcome,
    };
    let Some(user) = principal_user(&view, session) else {
        return replier.status(Status::Unauthenticated);
    };
    let principal = Principal::of(user);
    let mut request = Request_ {
        context,
        session,
        view: view.clone(),
        replier,
    };
    let result = dispatch(&mut request, &principal, command).await;
    match result {
        Ok(outcome) => outcome,
        Err(error) => request.replier.refuse(context, &error),
    }
}

/// Runs a request as its command family's handler. Sends never come here:
/// they take over the frame's buffer (no copy of the batch), so
/// `handle_frame` splits them off to `plan_send` / `send_planned`, and a
/// `NotSend` cannot hold one.
async fn dispatch(
    request: &mut Request_<'_>,
    principal: &Principal<'_>,
    command: NotSend<'_>,
) -> Handled<Outcome> {
    use Command as C;
    match command {
        C::Ping | C::Register(_) | C::Logout => Ok(request.replier.empty()),
        C::GetStats => system::stats(request, principal).await,
        C::GetSnapshot { compression, types } => {
            system::snapshot_file(request, principal, compression, types).await
        }
        C::GetClusterMetadata => system::cluster_metadata(request),
        C::DescribeOptions { scope } => system::describe_options(request, scope),
        C::GetMe => system::me(request).await,
        C::GetClient { client_id } => system::client(request, principal, client_id).await,
        C::GetClients => system::clients(request, principal).await,
        C::ClusterRouting { .. } => system::partition_routing(request),
        C::AttachConsumerSession { session, .. } => system::attach(request, session),
        C::GetUser { user } => users::get_user(request, principal, user),
        C::GetUsers => users::get_users(request, principal),
        command @ (C::CreateUser { .. }
        | C::DeleteUser { .. }
        | C::UpdateUser { .. }
        | C::UpdatePermissions { .. }
        | C::ChangePassword { .. }) => users::change_user(request, principal, command).await,
        C::GetPersonalAccessTokens => users::get_tokens(request),
        command @ (C::CreatePersonalAccessToken { .. } | C::DeletePersonalAccessToken { .. }) => {
            users::change_token(request, command).await
        }
        C::PollMessages(poll) => messages::poll(request, principal, &poll).await,
        command @ (C::FlushUnsavedBuffer { .. } | C::DeleteSegments { .. }) => {
            messages::partition_command(request, principal, command).await
        }
        C::GetConsumerOffset(target) => messages::get_offset(request, principal, &target).await,
        C::StoreConsumerOffset { target, offset, .. } => {
            messages::store_offset(request, principal, &target, offset).await
        }
        C::DeleteConsumerOffset { target, .. } => {
            messages::delete_offset(request, principal, &target).await
        }
        C::GetStream { stream } => streams::get_stream(request, principal, stream).await,
        C::GetStreams => streams::get_streams(request, principal).await,
        C::GetTopic { stream, topic } => {
            streams::get_topic(request, principal, stream, topic).await
        }
        C::GetTopics { stream } => streams::get_topics(request, principal, stream).await,
        command @ (C::PurgeStream { .. } | C::PurgeTopic { .. }) => {
            streams::purge(request, principal, command).await
        }
        command @ (C::CreateStream { .. }
        | C::UpdateStream { .. }
        | C::DeleteStream { .. }
        | C::CreateTopic { .. }
        | C::UpdateTopic { .. }
        | C::DeleteTopic { .. }
        | C::CreatePartitions { .. }
        | C::DeletePartitions { .. }) => streams::change(request, principal, command).await,
        C::GetConsumerGroup(group) => groups::get_group(request, principal, &group),
        C::GetConsumerGroups { stream, topic } => {
            groups::get_groups(request, principal, stream, topic)
        }
        C::SyncConsumerGroup(group) => groups::sync(request, principal, &group).await,
        command @ (C::CreateConsumerGroup { .. }
        | C::DeleteConsumerGroup(_)
        | C::JoinConsumerGroup(_)
        | C::LeaveConsumerGroup(_)) => groups::change(request, principal, command).await,
    }
}

/// The stream and topic a request names, looked up in `view`.
pub(crate) fn named_topic<'v>(
    view: &'v MetadataView,
    stream: &Identifier<'_>,
    topic: &Identifier<'_>,
) -> Handled<(&'v Stream, &'v Topic)> {
    Ok(view.topic(&Ident::from(stream), &Ident::from(topic))?)
}

/// The session as a consumer-group member: keyed by its session number, so
/// a logout or disconnect ends the membership.
pub(crate) fn member_key(session: &Session) -> MemberKey {
    // A routed data connection is its parent session in consumer groups.
    MemberKey(u128::from(session.acting_for.unwrap_or(session.number())))
}

/// Turn a request into a metadata command on this shard (time, hashes and
/// tokens are resolved here, off shard 0), then apply it on shard 0.
pub(crate) async fn prepare_and_apply(
    request: &mut Request_<'_>,
    command: &NotSend<'_>,
) -> Handled<(Applied, Arc<MetadataView>, Option<String>)> {
    let user_id = request.session.user_id().unwrap_or(0);
    let prepare_context = PrepareContext {
        now_us: now_us(),
        user_id,
        member: member_key(request.session),
        shard_count: request.context.shards as u32,
        default_durability: request.context.default_durability,
        hash_cost: iggyd_metadata::auth::HashCost::PRODUCTION,
    };
    let (command, token) = match prepare(command, &request.view, &prepare_context)? {
        Prepared::Command(command) => (command, None),
        Prepared::CommandWithToken { command, raw_token } => (command, Some(raw_token)),
        Prepared::NotMetadata => return Err(HandlerError::Status(Status::InvalidCommand)),
    };
    let (applied, view) = apply(request.context, command).await?;
    request.view = view.clone();
    Ok((applied, view, token))
}

/// Send a complete metadata command to shard 0 and install the view that
/// includes it before replying (read-your-writes on this shard).
pub(crate) async fn apply(
    context: &Rc<NetContext>,
    command: MetadataCommand,
) -> Handled<(Applied, Arc<MetadataView>)> {
    let response = context
        .mesh
        .request(context.shard, 0, Request::Metadata(Box::new(command)))
        .await
        .map_err(|_| HandlerError::Status(Status::Error))?;
    match response {
        Response::Metadata(Ok((applied, view))) => {
            if context.install_view(&view) {
                context.view_installed(&view);
            }
            // Shard 0 enqueued the view to every shard before answering; a
            // round trip through each other shard's inbox (FIFO) proves they
            // installed it, so the change is visible on every connection
            // once the client hears of it.
            for shard in 1..context.shards {
                if shard != context.shard {
                    let _ = context
                        .mesh
                        .request(context.shard, shard, Request::Ping)
                        .await;
                }
            }
            Ok((applied, view))
        }
        Response::Metadata(Err(status)) => Err(HandlerError::Status(status)),
        _ => Err(HandlerError::Status(Status::Error)),
    }
}

/// Run one op on the pump of `owner` and wait for its answer.
pub(crate) async fn partition_op<T>(
    context: &NetContext,
    owner: ShardId,
    make: impl FnOnce(Reply<T>) -> PartitionOp,
) -> Result<T, PumpError> {
    let (reply, answer) = flume::bounded(1);
    let op = make(reply);
    context
        .mesh
        .send(
            owner,
            ShardMessage::Partition(op, std::time::Instant::now()),
        )
        .await
        .map_err(|_| PumpError::Stopping)?;
    answer.recv_async().await.map_err(|_| PumpError::Stopping)?
}

pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

/// Logout, disconnect or eviction: leave every consumer group the session
/// joined, so its partitions move to the remaining members.
pub async fn session_ended(context: &Rc<NetContext>, session: &mut Session) {
    if session.login.is_some() && !session.memberships.is_empty() {
        let member = member_key(session);
        if let Err(error) = apply(context, MetadataCommand::MemberGone { member }).await {
            tracing::warn!(
                status = error.status().code(),
                "leaving consumer groups failed"
            );
        }
    }
    session.memberships.clear();
    session.progress.clear();
    session.login = None;
    session.ended = None;
    context.unwatch_grant(session.client_id);
    context.update_client(session.client_id, None, Vec::new());
    if let Some(activity) = context.client_activity(session.client_id) {
        activity.set_session(0);
    }
}

/// A session whose login a metadata change revoked, found at its next
/// request: answer the eviction; the connection then closes, and closing
/// leaves its groups (`connection::serve` ends the session).
fn end_revoked(session: &Session, header: &RequestHeader, revoked: Revoked) -> Outcome {
    tracing::info!(client_id = session.client_id, peer = %session.peer, ?revoked, "ending a revoked session");
    Outcome::Evict(encode_eviction(header, eviction_of(revoked)).to_vec())
}

/// End a session from the server's side while its connection waits for
/// the next request: a silent consumer-group member (StaleClient) or a
/// revoked login. Tell the client why, leave its groups; the caller closes.
pub async fn evict<S: monoio::io::AsyncWriteRent>(
    context: &Rc<NetContext>,
    session: &mut Session,
    stream: &mut S,
    reason: EvictionReason,
) {
    use monoio::io::AsyncWriteRentExt;
    let header = RequestHeader {
        client: session.login.map_or(0, |login| login.client),
        session: session.number(),
        ..RequestHeader::default()
    };
    tracing::info!(client_id = session.client_id, peer = %session.peer, ?reason, "evicting a session");
    let frame = encode_eviction(&header, reason).to_vec();
    let _ = stream.write_all(frame).await;
    session_ended(context, session).await;
}
