//! Multi-value register: the set of writes no other write has observed, shown as LWW.
//!
//! A write removes every write it observed (by `Stamp` coverage) and adds itself. Concurrent
//! writes stay side by side until a later write observes them; readers see the one with the
//! highest `Stamp`. Usually exactly one write is held.
