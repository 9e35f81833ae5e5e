//! The CPU backend: the plain reference ops, and the fast multithreaded ones
//! checked against them.
