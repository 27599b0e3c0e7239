//! Faults: a broker killed and restarted mid-run, or its connections cut.
