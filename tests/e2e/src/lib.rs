//! End-to-end suites against the lab: see tests/.
