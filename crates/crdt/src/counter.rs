//! Counters: per-origin increment totals and the observed baseline that resets them.
//!
//! Each origin replica's increments form a sequence in the order it issued them; replicas
//! keep the running totals `IncTotals { n, int, float }` per origin, merged by taking the one
//! with the larger `n` (it extends the other). A SET or DEL that observed totals `b` records `b`
//! as the baseline; the counter's contribution is `Σ_origin (totals - baseline)`, so
//! increments the SET did not observe are added on top of its value.
