//! TODO(owner: store helper) postgres
