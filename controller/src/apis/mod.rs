//! The contracts of the APIs ferry's children live in: the CDI and KubeVirt types ferry writes
//! and reads (only the fields it uses; the rest is kept as JSON), and the reading of their
//! status — and of a Job's — into small states that decisions match on.

pub mod cdi;
pub mod instancetype;
pub mod job;
pub mod kubevirt;
pub mod multus;
