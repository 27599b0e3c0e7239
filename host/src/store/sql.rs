//! TODO(owner: store helper) sql
