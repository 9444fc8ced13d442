//! `MetadataView`: the immutable snapshot of metadata that every shard
//! reads without locks.
//!
//! Flow: shard 0 is the only writer. It applies a command
//! (`MetadataStore::execute`: apply, append to the journal, fsync), calls
//! [`Metadata::publish`] and sends the resulting `Arc<MetadataView>` to
//! every shard over the mesh. Each shard keeps one `Arc<MetadataView>` and
//! swaps it when a newer `version` arrives (ignoring older ones, so
//! reordering on the mesh is harmless). Readers clone the `Arc` for the
//! duration of a request; a view never changes after it is published.
//!
//! Must not: offer any way to mutate (it derefs to `&Metadata` only), or
//! be shared through anything but the `Arc` handed over the mesh — the one
//! cross-shard `Arc` the style rules allow, because the data behind it is
//! immutable.
//!
//! Cost: a publish clones the whole state, linear in the number of streams,
//! topics, partitions and users. Metadata changes are rare, so this is cheap in practice; if
//! it ever shows up, per-stream `Arc`s give structural sharing without
//! changing this API.

use std::ops::Deref;
use std::sync::Arc;

use super::model::Metadata;

/// A published, read-only metadata snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataView {
    /// Commands applied when it was taken; strictly increases with each
    /// publish after a change.
    pub version: u64,
    metadata: Metadata,
}

impl MetadataView {
    /// Whether `other` is newer and should replace this one.
    pub fn is_superseded_by(&self, other: &Self) -> bool {
        other.version > self.version
    }
}

impl Deref for MetadataView {
    type Target = Metadata;

    fn deref(&self) -> &Metadata {
        &self.metadata
    }
}

impl Metadata {
    /// Takes an immutable snapshot for the other shards.
    pub fn publish(&self) -> Arc<MetadataView> {
        Arc::new(MetadataView {
            version: self.applied_commands,
            metadata: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Ident, MetadataCommand};

    use super::*;

    // Proves a published view is frozen: later applies do not show in it,
    // and the next view is newer.
    #[test]
    fn published_view_is_immutable() {
        let mut metadata = Metadata::new();
        let empty = metadata.publish();
        metadata
            .apply(MetadataCommand::CreateStream {
                name: "s".into(),
                created_at_us: 1,
            })
            .unwrap();
        let next = metadata.publish();
        assert_eq!(empty.streams_count(), 0);
        assert_eq!(next.streams_count(), 1);
        assert!(empty.is_superseded_by(&next));
        assert!(!next.is_superseded_by(&empty));
        assert_eq!(next.stream(&Ident::from("s")).unwrap().id, 0);
    }
}
