//! TODO(owner: lead) bench
