//! TODO(owner: lead) cli
