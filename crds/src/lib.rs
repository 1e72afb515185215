//! API types of ferry (group `migration.platform.example`, version `v1alpha1`).
