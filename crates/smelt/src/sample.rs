//! Sampling: greedy, temperature, top-k, top-p, min-p and penalties, seeded.
