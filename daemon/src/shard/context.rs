//! Per-shard state shared by the tasks of one shard on one thread (its
//! pump loop, and through `net::context::NetContext` its connections): who
//! the shard is, the mesh to the others, when the daemon started, and the
//! current metadata view. It is `Rc`-shared and `!Send` on purpose: it
//! never leaves its shard. Other shards learn about it only through mesh
//! messages.
//!
//! Must not: know about connections, sessions or clients (that state is
//! the front's, `shard::front`), or mutate partitions (the pump's).

use super::mesh::{Mesh, ShardId};
use iggyd_metadata::MetadataView;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug)]
pub struct ShardContext {
    pub shard: ShardId,
    pub shards: usize,
    pub mesh: Mesh,
    pub started: Instant,
    pub started_at_us: u64,
    view: RefCell<Arc<MetadataView>>,
    /// Partitions in the installed view (the descriptors storage keeps
    /// grow with them).
    partitions: Cell<u64>,
}

pub struct ContextSettings {
    pub shard: ShardId,
    pub shards: usize,
    pub mesh: Mesh,
    pub started: Instant,
    pub started_at_us: u64,
    pub view: Arc<MetadataView>,
}

impl ShardContext {
    pub fn new(settings: ContextSettings) -> ShardContext {
        assert!(settings.shard < settings.shards);
        assert!(settings.shards <= crate::limits::SHARDS_MAX);
        ShardContext {
            shard: settings.shard,
            shards: settings.shards,
            mesh: settings.mesh,
            started: settings.started,
            started_at_us: settings.started_at_us,
            partitions: Cell::new(settings.view.partitions_count() as u64),
            view: RefCell::new(settings.view),
        }
    }

    /// The current view; callers hold the `Arc` for one request.
    pub fn view(&self) -> Arc<MetadataView> {
        self.view.borrow().clone()
    }

    /// Install a newer view; older or equal versions are ignored, so the
    /// order in which views arrive does not matter. True when installed
    /// (the shard loop then tells its front, which ends the sessions the
    /// view no longer authorizes).
    pub fn install_view(&self, view: &Arc<MetadataView>) -> bool {
        let mut current = self.view.borrow_mut();
        if !current.is_superseded_by(view) {
            return false;
        }
        self.partitions.set(view.partitions_count() as u64);
        *current = view.clone();
        true
    }

    /// Partitions in the installed view.
    pub fn partitions(&self) -> u64 {
        self.partitions.get()
    }
}
