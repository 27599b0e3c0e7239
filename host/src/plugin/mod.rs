//! TODO(owner: plugin helper)
