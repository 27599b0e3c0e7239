//! TODO(owner: lead) worker
