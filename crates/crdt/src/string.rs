//! The string value: a register of the assigned bytes plus a counter of increments.
