//! High availability: leader election on a `coordination.k8s.io/v1` Lease, and the fence that
//! stops every write of a controller whose lease may have passed to another.
//!
//! The election is client-go's (`tools/leaderelection`): a candidate takes the Lease when it
//! has no holder or when its record has not changed for `leaseDurationSeconds` *as the candidate
//! observed it* (its own monotonic clock, so clock skew between nodes does not matter); every
//! take and renewal is an update carrying the `resourceVersion` read, so of two candidates racing
//! one gets a conflict. The leader renews every retry period.
//!
//! Why not a crate: kube-lease-manager 0.13 (the one that fits kube 5) takes an expired lease
//! by force-clearing it with an unconditional patch after a stale read, so a candidate can clear
//! a lease another has just taken and both believe they lead; and it reports no renewal times, so
//! a leader could not know when to stop writing. Fencing needs both.
//!
//! The fence ([`Fence`], [`FenceLayer`]) sits in the controller's Kubernetes client: every
//! request other than GET/HEAD/OPTIONS — status SSA, creates, patches, deletes, Events, finalizer
//! patches — is refused unless a renewal *sent* less than `renewDeadline` ago succeeded. A
//! candidate can only take the lease `leaseDuration` after it observed our last renewal, which
//! it can only have observed after we sent it; so with `renewDeadline < leaseDuration` a leader
//! stops writing before anyone else can start, even when it was frozen (SIGSTOP, a stalled VM)
//! or cut off from the apiserver, without having to notice anything first.

mod decide;
mod elector;
mod fence;

pub use decide::{Decision, Observed, decide};
pub use elector::{ElectionConfig, Elector, Lost};
pub use fence::{Fence, FenceLayer, FencedWrite, is_fenced};
