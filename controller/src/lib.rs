//! ferry-controller: reconciles VirtualMachineMigration and MigrationWave.
pub mod tls;
pub mod vsphere;
