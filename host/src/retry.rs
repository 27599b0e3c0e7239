//! TODO(owner: lead) retry
