//! `Effect`: what one write replicates.
