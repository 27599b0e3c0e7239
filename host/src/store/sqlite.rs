//! TODO(owner: store helper) sqlite
