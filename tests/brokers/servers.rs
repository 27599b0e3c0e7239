//! Private brokers for the fault tests.
