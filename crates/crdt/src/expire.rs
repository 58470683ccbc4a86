//! The TTL register: concurrent EXPIREs resolve to the longest TTL; PERSIST beats EXPIRE.
