//! TODO(owner: store helper) mysql
