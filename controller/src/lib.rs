//! ferry-controller: reconciles VirtualMachineMigration and MigrationWave.
