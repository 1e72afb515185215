//! What the tests of ferry-crds share.

#![allow(dead_code)]

pub mod doc_blocks;
